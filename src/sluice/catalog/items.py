"""Catalog items and the descriptions the planner leaves for the renderer.

An item is what a CREATE made: a stable id, its name and kind, its canonical CREATE text,
its columns, its timeline, the ids it depends on, and a kind-specific description. All of
it is plain data that `codec` stores and restores exactly. Sources and sinks describe
their formats with the format registry's classes (`formats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from sluice.catalog.formats import FormatDesc
from sluice.catalog.timeline import Timeline
from sluice.catalog.types import Column
from sluice.errors import InternalError

CONNECTION = "connection"
SOURCE = "source"
TABLE = "table"
DEAD_LETTER_TABLE = "dead-letter table"
VIEW = "view"
MATERIALIZED_VIEW = "materialized view"
SINK = "sink"
INDEX = "index"
SECRET = "secret"

KINDS = (CONNECTION, SOURCE, TABLE, DEAD_LETTER_TABLE, VIEW, MATERIALIZED_VIEW, SINK, INDEX, SECRET)
# The kind a statement names (`DROP MATERIALIZED VIEW`, `SHOW CREATE SINK`).
KIND_KEYWORDS = {
    "SOURCE": SOURCE,
    "VIEW": VIEW,
    "MATERIALIZED VIEW": MATERIALIZED_VIEW,
    "TABLE": TABLE,
    "SINK": SINK,
    "CONNECTION": CONNECTION,
    "INDEX": INDEX,
    "SECRET": SECRET,
}
# Kinds whose rows a query can read.
RELATIONS = (SOURCE, TABLE, DEAD_LETTER_TABLE, VIEW, MATERIALIZED_VIEW)


def a_kind(kind: str) -> str:
    """`kind` with its article: "a table", "an index"."""
    return ("an " if kind[0] in "aeiou" else "a ") + kind


# A source's retry bound for transient faults (RETRY TIMEOUT; Kafka Connect's
# errors.retry.timeout, whose default 0 never retries): a minute outlasts a broker restart
# or a leader election with room to spare (a 20 s outage costs only delay), while a
# snapshot over a source whose broker is gone still fails within a minute.
DEFAULT_RETRY_TIMEOUT_MS = 60_000
# The longest wait between two attempts (RETRY DELAY MAX; Connect's
# errors.retry.delay.max.ms defaults to 60 s, as long as our whole bound): 10 s notices a
# cleared fault soon, and is librdkafka's own longest reconnection backoff.
DEFAULT_RETRY_DELAY_MAX_MS = 10_000

KAFKA = "kafka"
SCHEMA_REGISTRY = "confluent schema registry"


@dataclass(frozen=True)
class ConnectionDesc:
    connection_type: str  # KAFKA | SCHEMA_REGISTRY
    brokers: tuple[str, ...] = ()
    url: str | None = None
    # Remaining options as (OPTION NAME, canonical SQL value), e.g. ("SASL PASSWORD", "SECRET pw").
    properties: tuple[tuple[str, str], ...] = ()
    # (OPTION NAME, item id of the secret) for each option given as `SECRET name`.
    secret_options: tuple[tuple[str, str], ...] = ()

    @property
    def registry_url(self) -> str:
        """A schema registry connection's URL (which planning made sure it has)."""
        if self.url is None:
            raise InternalError.bug(f"a {self.connection_type} connection has no URL")
        return self.url


@dataclass(frozen=True)
class SourceDesc:
    connection: str  # item id of the Kafka connection
    topic: str
    value_format: FormatDesc
    envelope: str  # none | upsert | debezium
    key_format: FormatDesc | None = None
    start_offsets: tuple[int, ...] = ()
    # (partition, low watermark) when the source was created: reads start there unless
    # told otherwise, as what retention deleted before the source existed was never its.
    retained_from: tuple[tuple[int, int], ...] = ()
    start_timestamp: int | None = None
    group_id_prefix: str | None = None
    # librdkafka's topic.metadata.refresh.interval.ms for the source's clients; None: its default.
    topic_metadata_refresh_interval_ms: int | None = None
    # The key's columns in the relation; a multi-column key packed by INCLUDE KEY AS is one.
    key_columns: tuple[str, ...] = ()
    key_packed: bool = False
    inline_error_column: str | None = None
    propagate_value_errors: bool = True
    # (KIND, column name) for PARTITION / OFFSET / TIMESTAMP / HEADERS, in INCLUDE order.
    metadata: tuple[tuple[str, str], ...] = ()
    dead_letter_table: str | None = None  # item id
    error_tolerance: int | None = None  # None: ALL (never fail)
    timestamp_interval_ms: int | None = None
    retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS
    retry_delay_max_ms: int = DEFAULT_RETRY_DELAY_MAX_MS


@dataclass(frozen=True)
class DeadLetterDesc:
    source: str  # item id


@dataclass(frozen=True)
class TableDesc:
    defaults: tuple[tuple[str, str], ...] = ()  # (column, SQL literal)
    primary_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class ViewDesc:
    query: str  # the body, canonical SQL of sluice's dialect


@dataclass(frozen=True)
class SinkDesc:
    source: str  # item id of the relation sunk
    connection: str
    topic: str
    # Of the relation's columns; None for a dead-letter sink, which writes each bad
    # message as it was read, in Kafka Connect's dead-letter format.
    value_format: FormatDesc | None
    envelope: str  # upsert | debezium | dead-letter
    key: tuple[str, ...] = ()
    key_format: FormatDesc | None = None  # of the KEY columns
    partition_count: int | None = None  # of the topic when the sink creates it (None: 1)


@dataclass(frozen=True)
class IndexDesc:
    """An index names columns of a relation; it never changes a result, and sluice's plans
    do not use one (Spark scans), so it is the catalog entry only — kept so that scripts
    that create and drop indexes, SQLite's corpus among them, run as written. A UNIQUE
    index (its text says UNIQUE) checks nothing, as tables' PRIMARY KEY and UNIQUE
    constraints do not."""

    on: str  # item id of the relation
    columns: tuple[str, ...]


Details = ConnectionDesc | SourceDesc | DeadLetterDesc | TableDesc | ViewDesc | SinkDesc | IndexDesc
D = TypeVar("D", bound=Details)


@dataclass(frozen=True)
class Item:
    id: str
    name: str
    kind: str
    create_sql: str
    columns: tuple[Column, ...] = ()
    timeline: Timeline | None = None
    depends_on: tuple[str, ...] = ()
    details: Details | None = None

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    # The description of each kind, for code that knows the kind it holds: asking an item
    # of another kind is a bug in sluice, reported as an internal error naming both.
    @property
    def connection_desc(self) -> ConnectionDesc:
        return self._details(ConnectionDesc)

    @property
    def source_desc(self) -> SourceDesc:
        return self._details(SourceDesc)

    @property
    def dead_letter_desc(self) -> DeadLetterDesc:
        return self._details(DeadLetterDesc)

    @property
    def table_desc(self) -> TableDesc:
        return self._details(TableDesc)

    @property
    def view_desc(self) -> ViewDesc:
        """Of a view or a materialized view."""
        return self._details(ViewDesc)

    @property
    def sink_desc(self) -> SinkDesc:
        return self._details(SinkDesc)

    @property
    def index_desc(self) -> IndexDesc:
        return self._details(IndexDesc)

    def _details(self, wanted: type[D]) -> D:
        if isinstance(self.details, wanted):
            return self.details
        raise InternalError.bug(f'{self.kind} "{self.name}" has no {wanted.__name__}')
