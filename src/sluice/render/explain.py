"""EXPLAIN PYSPARK: the program the renderer runs for a query, a source or a sink, as Python.

The renderer itself is run under a `pyspark_code.recording()`, so the program is its own
calls; only the offsets a snapshot reads, fixed from the topic's watermarks when a query
starts, are left as the variable `ranges` (per source name, `[[partition, start, end], …]`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import VariantType

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import FeatureNotSupported
from sluice.plan.plans import PysparkPlan, QueryPlan
from sluice.render.pyspark_code import Expr, Recording, Unrecordable, recording
from sluice.render.query import QueryRenderer, first_errors, relation_view
from sluice.render.sink import envelope_of
from sluice.render.source import SourceRead, render_source
from sluice.tables import TableStore

PREAMBLE = (
    "import json",
    "from pyspark.sql import functions as F",
    "from pyspark.sql.types import *",
    "from pyspark.sql.window import Window",
)
RANGES = "# ranges[source]: [[partition, start, end], …], each topic's offsets when the query starts"


DECODED = "its messages, decoded, each with its error or NULL"
# When what is printed runs, for a statement that does not run it once.
MATERIALIZED_VIEW_RUNS = "A query over the materialized view runs this as its part."
SUBSCRIBE_RUNS = "SUBSCRIBE runs this at its start and again whenever a table it reads is written,\nand emits the difference from the rows before."
SINK_RUNS = (
    'The sink "{name}" runs this at its start and again whenever a table its relation reads is written;\n'
    "the driver diffs the (identity, payload) pairs with those delivered and writes the changes to\n"
    'the topic "{topic}" in one Kafka transaction with a progress record (sluice.render.sink.SinkJob).'
)


@dataclass(frozen=True)
class ExplainedRead(SourceRead):
    """A snapshot read of the source `name` whose offsets are the program's `ranges`."""

    name: str = ""

    def ranges_option(self):
        return Expr((f"json.dumps(ranges[{_quoted(self.name)}])",))

    def offsets(self):
        return Expr((f"sum(end - start for _, start, end in ranges[{_quoted(self.name)}])",))


def pyspark_program(planned: PysparkPlan, tables: TableStore, ingested: frozenset[str]) -> list[str]:
    """The program of EXPLAIN PYSPARK, refused over a source ingested continuously
    (`ingested` now): that is read from its committed batches."""
    planned.refuse_continuous(ingested)
    item, catalog = planned.item, planned.catalog
    try:
        if planned.query is None:
            return source_program(item, catalog)
        if item is not None and item.kind == kinds.SINK:
            return sink_program(item, planned.query, catalog, tables)
        return query_program(planned.query, catalog, tables, _runs(planned))
    except Unrecordable as e:
        raise FeatureNotSupported(f"EXPLAIN PYSPARK does not print a program with {e} yet", span=planned.span) from None


def query_program(plan: QueryPlan, catalog: Catalog, tables: TableStore, runs: str | None = None, shape=None) -> list[str]:
    """What a SELECT runs: each source read and split into oks and errs, the relations
    as temporary views, the query (its rows projected by `shape`, given its frame), the
    guard that fails it on an error, its collection. `runs` says when it runs, if not
    once."""
    with recording() as program:
        queries = QueryRenderer(
            program.spark, catalog, lambda item_id: ExplainedRead((), name=catalog.by_id(item_id).name), tables
        )
        frame, guards, width = queries.prepare(plan, shape and (lambda frame: shape(program, frame)))
        for read in _reads(plan):
            item = catalog.by_id(read.item_id)
            _name_views(program, relation_view(read), item, read.errors)
        for item_id, collection in queries.collections.items():
            name = catalog.by_id(item_id).name
            program.name(collection.base, f"{name}_messages", f"{name}: {DECODED}")
            program.name(collection.errs, f"{name}_errs", f"{name}: its errors (errs)")
        hidden = len(frame.columns) - width
        shown = f"the rows are its first {width} column(s), the rest guards' flags" if hidden else "its rows"
        program.bind(frame, "query", f"The query ({shown})")
        frame.collect()
        checked = [g for g in guards if g.flag is not None or g.observed is not None]
        if checked:
            program.comment(_checked_text(checked))
            first = "".join(first_errors(checked).first().parts)
            program.raw(f"if {first} is not None:", f"    raise RuntimeError({first}.message)")
    return _program(program, runs)


def sink_program(sink: Item, plan: QueryPlan, catalog: Catalog, tables: TableStore) -> list[str]:
    """What a sink's job runs at each change of its relation: the relation's query, each
    row encoded on the executors into its identity and payload, collected for the driver
    to diff against what the sink delivered."""
    envelope = envelope_of(sink, catalog)
    envelope.prepare()  # no schema registry (refused in planning): nothing registered
    # The one type the encoding asks about: a jsonb a query gives is a VARIANT (a table's
    # own rows, whose types the recording knows, hold jsonb as text).
    types = {c.name: VariantType() for c in plan.columns if c.type.name == "jsonb"}

    def shape(program: Recording, frame):
        return envelope.shape(program.typed(frame, types))

    return query_program(plan, catalog, tables, SINK_RUNS.format(name=sink.name, topic=sink.details.topic), shape)


def _runs(planned: PysparkPlan) -> str | None:
    if planned.query.status == "SUBSCRIBE":
        return SUBSCRIBE_RUNS
    if planned.item is not None and planned.item.kind == kinds.MATERIALIZED_VIEW:
        return MATERIALIZED_VIEW_RUNS
    return None


def source_program(item: Item, catalog: Catalog) -> list[str]:
    """What a source is read as: its oks and its errs."""
    with recording() as program:
        collection = render_source(program.spark, item, catalog, ExplainedRead((), name=item.name))
        program.name(collection.base, f"{item.name}_messages", DECODED[:1].upper() + DECODED[1:])
        program.bind(collection.oks, f"{item.name}_oks", "Its rows (oks)")
        errs = "Its errors (errs): a query over the source fails with the first"
        program.bind(collection.errs, f"{item.name}_errs", errs)
    return _program(program)


def _reads(plan: QueryPlan):
    """Every relation the query reads, through views too."""
    for read in plan.reads:
        yield read
        if read.query is not None:
            yield from _reads(read.query)


def _name_views(program: Recording, view: str, item: Item, errors: str | None) -> None:
    suffix = {"ONLY": "only_errors", "IGNORE": "ignoring_errors"}.get(errors or "", "rows")
    for frame in program.frames_viewed_as(view):
        program.name(frame, f"{item.name}_{suffix}" if item.kind != kinds.TABLE else item.name)


def _checked_text(guards) -> str:
    said = []
    for guard in guards:
        if guard.flag is not None:
            said.append(f"its rows' flag {guard.flag}")
        else:
            counted = "".join(guard.observed.messages.parts)
            said.append(f'the observation "{guard.observed.name}" counts {counted} messages, none an error')
    return (
        "Guards the query's own pass checks: "
        + "; ".join(said)
        + ".\nsluice reads their first error only when one of them may have one; the query then fails with it."
    )


def _program(program: Recording, runs: str | None = None) -> list[str]:
    lines = program.lines()
    reads = [RANGES] if any("ranges[" in line for line in lines) else []
    said = [f"# {line}" for line in runs.split("\n")] if runs is not None else []
    return [*sorted(program.imports), *PREAMBLE, *reads, *said, *lines]


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
