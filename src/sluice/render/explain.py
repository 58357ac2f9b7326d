"""EXPLAIN PYSPARK: the program the renderer runs for a query, a source or a sink, as Python.

The renderer itself is run under a `pyspark_code.recording()`, so the program is its own
calls. What is fixed only when it runs is left as variables, per source name: `ranges`,
the offsets a snapshot reads (`[[partition, start, end], …]`, from the topic's watermarks
when a query starts); for a source ingested continuously, `stores` (its folder),
`backlogs` (what its ingestion commits before its stream starts), `starts` (where its
stream starts), `committed` (where its last commit then ends) and `files` (per kind, the files of the commits a statement reads); and
`schema_ids`, the ids a sink's schemas get from its registry.

A continuously ingested source is printed as its ingestion — its decoding, the function
writing each micro-batch's files, its backlog's commit and the streaming query — and the
reads of its committed files, the same functions the ingestion and the store run.
Printing starts and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, VariantType

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import FeatureNotSupported, InternalError
from sluice.plan.plans import PysparkPlan, QueryPlan
from sluice.render.query import QueryRenderer, first_errors, relation_view
from sluice.spark.pyspark_code import recording
from sluice.spark.pyspark_expr import Expr, Unrecordable
from sluice.spark.pyspark_frame import Frame, Recording, Typed
from sluice.spark.pyspark_layout import wrapped
from sluice.storage.ingest import (
    backlog_read,
    batch_rows,
    ingested_messages,
    max_batch_messages,
    stream_read,
    streaming,
    write_batch,
)
from sluice.storage.sink.dead_letter import dead_letter_messages
from sluice.storage.sink.envelopes import envelope_of
from sluice.storage.source import ERRS_COLUMNS, Collection, SourceRead, render_source
from sluice.storage.stored import (
    IDENTITY,
    StoredCollection,
    no_standing,
    stored_standing,
)
from sluice.storage.tables import TableStore

PREAMBLE = (
    "import json",
    "from pyspark.sql import functions as F",
    "from pyspark.sql.types import *",
    "from pyspark.sql.window import Window",
)
# What the program's variables hold, said where it uses them.
VARIABLES = {
    "ranges[": "# ranges[source]: [[partition, start, end], …], each topic's offsets when the query starts",
    "stores[": "# stores[source]: its folder under <data dir>/streams; backlogs[source]: [[partition, from, to], …],\n"
    "#   what its topic holds past where its last commit ended (or where the source starts) when its\n"
    "#   ingestion starts; starts[source]: {\"partition\": offset}, where that ends and its stream starts reading;\n"
    "#   committed[source]: {\"partition\": offset}, where its last commit then ends (its stream fails for good\n"
    "#   if its topic's offsets fall below)",
    "files[": "# files[source][kind]: the files of that kind of the commits a statement reads, once the ingestion\n"
    "#   has committed every offset its topic held when the statement started",
    "schema_ids[": "# schema_ids[subject]: the id the schema registry gives the sink's schema registered under it",
}

# The program's lines are at most this wide, but for a string literal longer: one line a
# row, in a table, they fit a terminal of 102 columns (`sluice run -At` prints them bare).
PROGRAM_WIDTH = 100

DECODED = "its messages, decoded, each with its error or NULL"
# When what is printed runs, for a statement that does not run it once.
MATERIALIZED_VIEW_RUNS = "A query over the materialized view runs this as its part."
SUBSCRIBE_RUNS = "SUBSCRIBE runs this at its start and again whenever a table it reads is written,\nand emits the difference from the rows before."
SINK_RUNS = (
    'The sink "{name}" runs this at its start and again whenever a source its relation reads commits\n'
    "or a table it reads is written;\n"
    "its (identity, payload) pairs are grouped by identity with those delivered (on Spark; on the\n"
    "driver, in Arrow, for at most 1,000 rows) and only the changes are written to the topic\n"
    '"{topic}", in one Kafka transaction with a progress record (sluice.storage.sink.job.SinkJob).'
)
DEAD_LETTER_SINK_RUNS = (
    'The sink "{name}" runs this at its start and again whenever its source commits, reading only the\n'
    "commits past the offsets its last progress record delivered and their rows past those offsets;\n"
    "the driver writes each pair as the bad message's key, value and headers with Kafka Connect's context\n"
    '"__connect.errors.*" headers, to the topic "{topic}", in one Kafka transaction with a progress\n'
    "record (sluice.storage.sink.dead_letter)."
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
    """The program of EXPLAIN PYSPARK; a source ingested continuously (by the plan's say,
    or `ingested` now) is read from its committed batches."""
    item, catalog, query = planned.item, planned.catalog, planned.query
    continuous = planned.continuous(ingested)
    try:
        if query is None:
            if item is None:  # never: `continuous` refuses a plan that names neither
                raise InternalError.bug("EXPLAIN PYSPARK of neither a query nor a source")
            return source_program(item, catalog, bool(continuous))
        if item is not None and item.kind == kinds.SINK:
            return sink_program(item, query, catalog, tables, continuous)
        return query_program(query, catalog, tables, continuous, _runs(query, item))
    except Unrecordable as e:
        raise FeatureNotSupported(f"EXPLAIN PYSPARK does not print a program with {e} yet", span=planned.span) from None


def query_program(
    plan: QueryPlan,
    catalog: Catalog,
    tables: TableStore,
    continuous: Sequence[str] = (),
    runs: str | None = None,
    shape: Callable[[Recording, DataFrame], Sequence[SparkColumn]] | None = None,
) -> list[str]:
    """What a SELECT runs: each source read and split into oks and errs (a source in
    `continuous`: its ingestion, then its committed files read), the relations as
    temporary views, the query (its rows projected by `shape`, given its frame), the
    guard that fails it on an error, its collection. `runs` says when it runs, if not
    once."""
    with recording() as program:
        stored = {s: ExplainedStore.ingested(program, catalog.by_id(s), catalog) for s in continuous}
        queries = QueryRenderer(
            _spark(program),
            catalog,
            lambda item_id: ExplainedRead((), name=catalog.by_id(item_id).name),
            tables,
            stored=stored,
        )
        shaped = None if shape is None else (lambda frame: shape(program, frame))
        prepared, guards, width = queries.prepare(plan, shaped)
        frame = _recorded(prepared)
        for read in _reads(plan):
            item = catalog.by_id(read.item_id)
            _name_views(program, relation_view(read), item, read.errors)
        for item_id, collection in queries.collections.items():
            name = catalog.by_id(item_id).name
            if item_id in stored:
                stored[item_id].name(program, collection)
                continue
            program.name(_recorded(collection.base), f"{name}_messages", f"{name}: {DECODED}")
            program.name(_recorded(collection.errs), f"{name}_errs", f"{name}: its errors (errs)")
        hidden = len(frame.columns) - width
        shown = f"the rows are its first {width} column(s), the rest guards' flags" if hidden else "its rows"
        program.bind(frame, "query", f"The query ({shown})")
        frame.collect()
        checked = [g for g in guards if g.flag is not None or g.observed is not None]
        if checked:
            program.comment(_checked_text(checked))
            first = "".join(_expression(first_errors(checked).first()).parts)
            program.raw(f"if {first} is not None:", f"    raise RuntimeError({first}.message)")
    return _program(program, runs)


def sink_program(
    sink: Item, plan: QueryPlan, catalog: Catalog, tables: TableStore, continuous: Sequence[str] = ()
) -> list[str]:
    """What a sink's job runs at each change of its relation: the relation's query, each
    row encoded on the executors into its identity and payload, collected for the driver
    to diff against what the sink delivered."""
    relation = catalog.by_id(sink.sink_desc.source)
    if relation.kind == kinds.DEAD_LETTER_TABLE:
        return dead_letter_sink_program(sink, catalog.by_id(relation.dead_letter_desc.source), catalog)
    # The one type the encoding asks about: a jsonb a query gives is a VARIANT (a table's
    # own rows, whose types the recording knows, hold jsonb as text).
    types: dict[str, DataType] = {c.name: VariantType() for c in plan.columns if c.type.name == "jsonb"}

    def shape(program: Recording, frame: DataFrame) -> Sequence[SparkColumn]:
        # Made while recording: a schema registry's ids are the program's `schema_ids`,
        # and nothing is registered.
        envelope = envelope_of(sink, catalog)
        envelope.prepare()
        return envelope.shape(_as_frame(program.typed(_recorded(frame), types)))

    runs = SINK_RUNS.format(name=sink.name, topic=sink.sink_desc.topic)
    return query_program(plan, catalog, tables, continuous, runs, shape)


def dead_letter_sink_program(sink: Item, source: Item, catalog: Catalog) -> list[str]:
    """What a sink from a dead-letter table runs at each commit of its source: the
    source's ingestion, then the dead-letter rows of its commits, each encoded into its
    identity and payload, for the driver to write as Kafka Connect's DLQ messages."""
    with recording() as program:
        store = ExplainedStore.ingested(program, source, catalog)
        dead_letters = _recorded(store.collection(_spark(program), source).dead_letters)
        program.bind(dead_letters, f"{source.name}_dead_letters", "Its dead-letter rows")
        messages = _recorded(dead_letter_messages(_as_frame(dead_letters), envelope_of(sink, catalog)))
        program.bind(messages, "query", "The (identity, payload) pairs of the dead-letter rows, in the order of their messages")
        messages.collect()
    return _program(program, DEAD_LETTER_SINK_RUNS.format(name=sink.name, topic=sink.sink_desc.topic))


def _runs(query: QueryPlan, item: Item | None) -> str | None:
    if query.status == "SUBSCRIBE":
        return SUBSCRIBE_RUNS
    if item is not None and item.kind == kinds.MATERIALIZED_VIEW:
        return MATERIALIZED_VIEW_RUNS
    return None


def source_program(item: Item, catalog: Catalog, continuous: bool = False) -> list[str]:
    """What a source is read as: its oks and its errs (ingested continuously: its
    ingestion, then its committed files read)."""
    with recording() as program:
        if continuous:
            store = ExplainedStore.ingested(program, item, catalog)
            collection = store.collection(_spark(program), item)
            if item.source_desc.dead_letter_table is not None:
                program.bind(_recorded(collection.dead_letters), f"{item.name}_dead_letters", "Its dead-letter rows")
        else:
            collection = render_source(_spark(program), item, catalog, ExplainedRead((), name=item.name))
            program.name(_recorded(collection.base), f"{item.name}_messages", DECODED[:1].upper() + DECODED[1:])
        program.bind(_recorded(collection.oks), f"{item.name}_oks", "Its rows (oks)")
        errs = "Its errors (errs): a query over the source fails with the first"
        program.bind(_recorded(collection.errs), f"{item.name}_errs", errs)
    return _program(program)


@dataclass(frozen=True)
class ExplainedStore:
    """A continuously ingested source in a program: its committed files, read as the store
    reads them (`files[name][kind]`), in the schema its ingestion writes them in."""

    item: Item
    schema: Typed  # of the committed files

    @classmethod
    def ingested(cls, program: Recording, item: Item, catalog: Catalog) -> ExplainedStore:
        """The source's ingestion, printed: its decoding and its stream, the function
        writing a micro-batch's rows as a commit's files, the function committing its
        backlog and starting the streaming query (`{name}_ingest()`, which the program
        defines and does not call)."""
        name, quoted = item.name, _quoted(item.name)
        upsert = item.source_desc.envelope != "none"
        read = _recorded(
            stream_read(
                _spark(program),
                item,
                catalog,
                Expr((f"json.dumps(starts[{quoted}])",)),
                Expr((f"json.dumps(committed[{quoted}])",)),
            )
        )
        decode = f"{name}_messages"
        with program.function(decode, "raw", comment=f"{name}: {STREAM_UPSERT if upsert else STREAM}") as body:
            decoded = _recorded(ingested_messages(_as_frame(Frame(body, ("raw",), dict(read.fields))), item.source_desc))
            body.returns(decoded)
        stream = Frame(program, (f"{decode}(", read, ")"), dict(decoded.fields))
        program.bind(stream, f"{name}_stream", f"{name}: its stream's messages")
        batch, schema = f"{name}_batch", f"{name}_files_schema"
        parameters = ("messages", "standing", "ingested_ms") if upsert else ("messages", "ingested_ms")
        with program.function(batch, *parameters, comment=BATCH_UPSERT if upsert else BATCH) as body:
            given = _as_frame(Frame(body, ("standing",), dict.fromkeys(("__k", *IDENTITY)))) if upsert else None
            messages = _as_frame(Frame(body, ("messages",), dict(stream.fields)))
            body.returns(_recorded(batch_rows(messages, item, Expr(("ingested_ms",)), given)))
        program.imports.add("import time")
        with program.function(f"{name}_commit", "batch", "n", comment=COMMIT_UPSERT if upsert else COMMIT) as body:
            arguments: tuple = ("batch",)
            if upsert:
                reader = body.spark.read.schema(Typed((schema,), _batch_fields(item)))
                program.imports.add("import glob")
                standing = stored_standing(
                    lambda kind: _as_frame(
                        reader.parquet(Expr((f'*glob.glob(stores[{quoted}] + "/batch-*/out/__out={kind}/*.parquet")',)))
                    )
                )
                arguments = ("batch, ", standing)
            rows = _as_frame(Expr((f"{batch}(", *arguments, ", int(time.time() * 1000))")))
            body.statement(write_batch(rows, Expr((f'stores[{quoted}] + f"/batch-{{n}}/out"',))).parts)
        checkpoint = Expr((f'stores[{quoted}] + "/checkpoint"',))
        most = max_batch_messages()
        with program.function(f"{name}_ingest", comment=INGESTION.format(name=name, most=f"{most:,}")) as body:
            backlog = backlog_read(_spark(body), item, catalog, Expr((f"json.dumps(backlogs[{quoted}])",)))
            body.statement((f"{name}_commit({decode}(", backlog, '), "backlog")'))
            stream_of = _as_frame(Expr((f"{name}_stream",)))
            body.returns(streaming(stream_of, Expr((f"{name}_commit",)), item, checkpoint))
        program.comment("The schema of its committed files (the ingestion keeps it in schema.json)")
        empty = (", ", no_standing(_spark(program))) if upsert else ()
        program.statement((f"{batch}(", stream, *empty, ", 0).schema"), schema)
        return cls(item, Typed((schema,), _batch_fields(item)))

    def collection(self, spark, item: Item) -> Collection:
        schema, quoted = self.schema, _quoted(item.name)
        return StoredCollection(
            item, lambda kind: spark.read.schema(schema).parquet(Expr((f"*files[{quoted}][{_quoted(kind)}]",)))
        )

    def release(self) -> None:
        """Nothing to release: printing a program holds no store's files."""

    def name(self, program: Recording, collection: Collection) -> None:
        name = self.item.name
        program.name(_recorded(collection.errs), f"{name}_errs", f"{name}: its errors (errs), from its committed files")


STREAM = (
    "a read of its topic by its ingestion (its stream's, its backlog's), decoded, each message with its error\n"
    "or NULL"
)
STREAM_UPSERT = (
    "a read of its topic by its ingestion (its stream's, its backlog's), decoded, with only the columns its state\n"
    "and rows use"
)
BATCH = "A micro-batch's rows: one per (message, kind it goes to), `__out` naming the kind"
BATCH_UPSERT = (
    "A micro-batch's rows: its messages against the upsert state before it (`standing`: per key, the\n"
    "winning message's key and place), giving every error message, each key's old winner leaving the state\n"
    "(−1) and its latest message entering it (+1); one row per (message, kind it goes to), `__out` naming the kind"
)
COMMIT = (
    "Each micro-batch written as files (Ingestion._commit; one Spark runs again after a restart reads only\n"
    "what lies past the store's last commit: the reader's start_offsets), then published as the next commit\n"
    "with its record:\n"
    "offsets, files, checksums (Store.commit)"
)
COMMIT_UPSERT = (
    COMMIT
    + ";\nthe upsert state is what the micro-batches before it wrote (when sluice runs it, the commits before it:\n"
    "Store.standing, the `state` rows no commit retracted)"
)
INGESTION = (
    '{name}\'s ingestion, the streaming query: sluice starts it once, at the first statement that reads "{name}"\n'
    "continuously, and resumes it from its checkpoint when a session opens the data directory; a statement\n"
    "reads the files it has committed. Its backlog is committed first, by a batch job as a micro-batch (by\n"
    "jobs of at most {most} messages: Ingestion._commit_backlog), and the stream starts where it ends"
)


def _batch_fields(item: Item) -> dict:
    """The columns of a commit's files, as `batch_rows` makes them."""
    headers = ("headers",) if item.source_desc.dead_letter_table is not None else ()
    err = dict.fromkeys((*ERRS_COLUMNS, *headers, "mz_timestamp"))
    return {"__out": None, "row": dict.fromkeys(c.name for c in item.columns), "err": err, "__p": None, "__o": None, "__seen": None, "__k": None}


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
    reads = [said for variable, said in VARIABLES.items() if any(variable in line for line in lines)]
    reads = [line for said in reads for line in said.split("\n")]
    said = [f"# {line}" for line in runs.split("\n")] if runs is not None else []
    program_lines = [*sorted(program.imports), *PREAMBLE, *reads, *said, *lines]
    return [short for line in program_lines for short in wrapped(line, PROGRAM_WIDTH)]


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The recording's stand-ins for Spark's objects (`pyspark_code`), typed as what they stand
# for where the renderer takes them: its code runs on them unchanged, and so is checked
# as the Spark code it is. PySpark's stubs cannot say "or a recording's stand-in".
def _spark(program: Recording) -> SparkSession:
    return cast(SparkSession, program.spark)


def _as_frame(frame: Expr) -> DataFrame:
    return cast(DataFrame, frame)


# What the renderer hands back while recording is the recording's own: checked, not assumed.
def _recorded(frame: DataFrame | None) -> Frame:
    if not isinstance(frame, Frame):
        raise InternalError.bug(f"a {type(frame).__name__} where a recording's frame was due")
    return frame


def _expression(value: object) -> Expr:
    if not isinstance(value, Expr):
        raise InternalError.bug(f"a {type(value).__name__} where a recording's expression was due")
    return value
