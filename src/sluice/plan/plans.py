"""What the planner hands the session: plain data describing the effect of a statement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.catalog.items import Item
from sluice.catalog.timeline import Timeline
from sluice.catalog.types import Column
from sluice.errors import InternalError


@dataclass(frozen=True)
class CreatePlan:
    """Add `items` to the catalog in one transaction (a source and its dead-letter table)."""

    items: tuple[Item, ...]
    status: str


@dataclass(frozen=True)
class ValidatePlan:
    """Reach the external system of `connection` (VALIDATE CONNECTION, CREATE CONNECTION
    unless WITH (VALIDATE = false)), then carry out `then` (the connection's creation), if
    any."""

    connection: Item
    status: str
    then: CreatePlan | None = None


@dataclass(frozen=True)
class SecretPlan:
    """Store `value` as the secret `secret_id`'s: CREATE SECRET (with the `item` to add to
    the catalog once the value is stored) or ALTER SECRET (no item)."""

    secret_id: str
    value: str = field(repr=False)
    status: str = "CREATE SECRET"
    item: Item | None = None


@dataclass(frozen=True)
class DropPlan:
    ids: tuple[str, ...]
    status: str


@dataclass(frozen=True)
class NoticePlan:
    """Nothing to do, and a notice saying why (`IF [NOT] EXISTS`)."""

    notice: str
    status: str


@dataclass(frozen=True)
class RowsPlan:
    """A result computed from the catalog alone (SHOW, EXPLAIN)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    status: str


@dataclass(frozen=True)
class Read:
    """One relation a query reads, and how: `errors` is None, "IGNORE" or "ONLY". A view
    (materialized or not) comes with its own query, planned: `query`."""

    item_id: str
    errors: str | None = None
    query: QueryPlan | None = field(default=None, compare=False)


@dataclass(frozen=True)
class QueryPlan:
    """A query over catalog relations: sqlglot tree with names qualified, output columns."""

    sql: str
    expression: Any = field(repr=False)  # sqlglot expression, qualified against the catalog
    columns: tuple[Column, ...]
    reads: tuple[Read, ...]
    timeline: Timeline | None
    status: str = "SELECT"


@dataclass(frozen=True)
class PysparkPlan:
    """EXPLAIN PYSPARK: the program of a query (`query`: a SELECT's, a SUBSCRIBE's, a
    view's or a sink's relation's) or of a source (`item` alone), over `catalog` (holding
    what the explained statement creates, `item`). `ingests`: the statement ingests every
    source it reads continuously (SUBSCRIBE, a sink)."""

    catalog: Any = field(repr=False)
    query: QueryPlan | None = None
    item: Item | None = None
    span: Any = None  # the EXPLAIN statement's
    status: str = "EXPLAIN"
    ingests: bool = False

    def continuous(self, ingested: frozenset[str] = frozenset()) -> list[str]:
        """The sources the program reads from their committed batches, being ingested
        continuously: by the catalog's say, by the statement's (`ingests`), or `ingested`
        already (ids)."""
        catalog = self.catalog
        if self.query is not None:
            reads = [r.item_id for r in self.query.reads]
        elif self.item is not None:
            reads = [self.item.id]
        else:
            raise InternalError.bug("EXPLAIN PYSPARK of neither a query nor a source")
        sources = catalog.upstream_sources(reads)
        continuous = set(sources) if self.ingests else catalog.continuous_sources() | ingested
        return [s for s in sources if s in continuous]


@dataclass(frozen=True)
class PhysicalPlan:
    """EXPLAIN PHYSICAL PLAN: Spark's physical plan of the DataFrame sluice runs for `query`
    (a SELECT's, a view's), which needs Spark to make."""

    query: QueryPlan
    span: Any = None  # the EXPLAIN statement's
    status: str = "EXPLAIN"


@dataclass(frozen=True)
class StatisticsPlan:
    """SHOW SOURCE STATISTICS: the counters of these sources as their continuous
    ingestion has committed them, and its status (`running`, `starting`, `failed` with the
    reason, or `not ingested`); reading them neither waits nor starts an ingestion."""

    source_ids: tuple[str, ...]
    columns: tuple[str, ...] = (
        "source", "messages_read", "errors", "dead_lettered", "last_error_at", "status", "reason"
    )
    status: str = "SHOW"


@dataclass(frozen=True)
class SinkStatusPlan:
    """SHOW SINKS: each sink's catalog row (name, type, relation), then what its job says:
    its status (`starting`, `running`, `stalled` on its relation's error, `failed` on a
    fault it retries, `stopped` when this session does not run it), rows written, the
    last offset written, and the error or reason."""

    rows: tuple[tuple[Any, ...], ...]
    sink_ids: tuple[str, ...]
    columns: tuple[str, ...] = ("name", "type", "from", "status", "rows_written", "last_offset", "error")
    status: str = "SHOW"


@dataclass(frozen=True)
class SubscribePlan:
    query: QueryPlan
    status: str = "SUBSCRIBE"


@dataclass(frozen=True)
class WritePlan:
    """INSERT, UPDATE or DELETE on a table (`status` says which). The rows to store are
    `rows`'s, one output column per column of the table, in its order: those to add (INSERT)
    or the table's rows after the change (UPDATE, DELETE). An INSERT of plain literals has
    them as stored instead (`literal_rows`), needing no query run. `matched` counts the rows
    an UPDATE or DELETE changes."""

    table_id: str
    sql: str
    status: str
    rows: QueryPlan | None = None
    literal_rows: tuple[tuple[Any, ...], ...] | None = None
    matched: QueryPlan | None = None


Plan = (
    CreatePlan
    | ValidatePlan
    | SecretPlan
    | DropPlan
    | NoticePlan
    | RowsPlan
    | QueryPlan
    | StatisticsPlan
    | PhysicalPlan
    | PysparkPlan
    | SinkStatusPlan
    | SubscribePlan
    | WritePlan
)
