"""Kafka sinks: a job per sink writing its relation's changes to a topic, exactly once.

**How changes are computed.** A sink's relation may be a table, a source, a dead-letter
table or a view over them; none of these is a Spark streaming query whose output is a
change stream (a view is evaluated at read time over its sources' committed batches, a
table is a file replaced per statement). So a sink works as SUBSCRIBE does: each time
what the relation reads changes (a source commits a micro-batch, a table is written) it
evaluates the relation and diffs it against what it last delivered — and the diff runs on
Spark, so that a step costs the driver and Kafka O(change), not O(relation):

* each row is encoded on the executors into two byte strings, its *identity* and its
  *payload* (`SinkEnvelope.shape`; JSON in the JVM, other formats by an Arrow-batched
  Python UDF over the format registry's encoders — one encoder per format, whatever writes
  it);
* the delivered state is Parquet, `(identity, payload, count)`, under the sink's folder,
  `state/<version>/`. A step groups the relation's pairs by identity together with the
  state of the last committed version (one shuffle: both sides are unioned, tagged, so
  each group holds the new and the delivered payload and count), in one Spark job
  writing the next version's state through Spark's Parquet writer (so it goes where the
  sink's folder is, a data URI included; the driver marks the version `complete` before
  its transaction): every group, each marked whether the driver wants it — an identity
  whose payload or count differ (plus, for the checks, a key held by two rows and rows a
  guard flags), each in a folder of its kind — the state being the groups still held
  (count > 0);
* the wanted groups' folder alone is read back to the driver as Arrow, which works out
  each one's change; the driver builds the messages of those alone.

A relation and a state of at most `SMALL` (1,000) rows are grouped on the driver instead,
by Arrow with the same rules: a Spark shuffle costs more than that many pairs, and sinks
over small tables are the common case of tests and demos. A step finds out by collecting
at most `SMALL + 1` rows of the relation.

Two designs were weighed. Deltas from the store's commits (a commit's rows and retractions
are the change of a source, so a view linear over one source could sink each commit's
rows alone) would make Spark's part O(change) too, but they serve only sources and views
that are filters and projections of one source, not tables (a file replaced per
statement), joins or aggregates, and the unique-key check needs the delivered keys anyway.
The diff on Spark serves every relation with one mechanism and keeps the driver and Kafka
at O(change); its Spark cost per step is a scan and a shuffle of the relation, which
Spark runs on every core. A dead-letter table, append-only and whose rows carry their
message's place, reads only the commits past what it delivered (`dead_letter_sink.py`).
What a step over a large relation still costs is Spark's: evaluating it, encoding it
(the Python UDF for columns the JVM cannot write with the encoder's bytes, such as
doubles), and the shuffle — `Status.seconds` shows the parts of the last step, and
`bench/sink.py` prints them.

A relation with errors (a query over it would fail) delivers nothing: the sink is
`stalled` with the error and tries again at the next change, so it resumes by itself once
the error is retracted. A KEY that two rows share stalls it as well (23505).

**Envelopes, the extension point.** How rows become identities, payloads and messages is
a `SinkEnvelope`: `shape(frame)` gives the two Spark columns (identity, payload) of the
relation's frame, and `messages(change)` turns one `Change` (identity, payload before,
payload after, each None when absent) into the `Message`s it writes (key, value,
headers); `batch(changes)` does it for a step's `Changes` at once (an envelope may do it
without a Python object per change). `Upsert` (key = KEY columns, value = the row, a
deleted key a tombstone) and `Debezium` (value `{"before": …, "after": …}`, with or
without a KEY) are here; a relation whose change rows become messages differently — a
dead-letter table's rows becoming Kafka Connect DLQ messages with their original key,
value and headers plus context headers — is another `SinkEnvelope`, registered with
`register_envelope(accepts, make)`: `accepts(sink, relation)` chooses it, `make(sink,
catalog)` builds it. The loop never changes for it.

**Exactly once.** Each sink has one transactional producer (`transactional.id` the
sink's identity, `sluice-sink-<uuid>`, see `sink_identity`). A step that has changes writes
the new state (`state/<version>`, fsynced) first, then, in one Kafka transaction, the
step's messages and — once every one of them is acknowledged — a progress record in the
connection's progress topic `_sluice-progress` (key the sink's identity, value the
version, the rows written in all, what this step wrote per partition — first and last
offset, count — and, for a dead-letter sink, `read`: `kafka/progress.py`; Materialize
keeps such a topic, `_materialize-progress-…`, keyed `mz-sink-<id>`), and commits; older
states are removed after. A message whose delivery report is an error (a broker away
longer than the transaction's timeout, `TRANSACTION_TIMEOUT_MS`), or a commit that fails,
aborts the transaction: no record is written for a step that was not delivered, and the
step is done again from the last committed state. On start the producer is initialised
(which fences a previous incarnation and aborts its open transaction), the sink reads its
last committed progress record with `isolation.level=read_committed` — backwards from the
progress topic's end, never its whole history — checks that the messages it names are in
the topic (a record naming offsets the topic does not hold is an error, not a place to
resume from), and resumes from the state of exactly that version, discarding any newer
state a crash left uncommitted. So whatever instant a process dies at, the topic read
with read_committed holds every change once: a step either committed (its state is the
one resumed from) or did not (it is computed again). On the embedded broker, which shows
aborted transactions to read_committed consumers, the same holds as sluice's own readers
see the topic (`kafka/progress.py`). A state written by an older sluice
(`state/<version>.arrow`, Arrow IPC) is rewritten in this layout when the sink starts
(`SinkState.upgrade`).

**Faults.** A Kafka or registry fault (a broker unreachable, a transaction that failed)
aborts the step's transaction; the sink shows `failed` with the reason and retries with
the connection's backoff (`kafka/retry.py`'s doubling delays, capped at the default RETRY
DELAY MAX), from its last committed state, until it gets through.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from sluice.catalog.formats import AvroRegistry, Format, Json
from sluice.catalog.items import DEFAULT_RETRY_DELAY_MAX_MS, DEFAULT_RETRY_TIMEOUT_MS, Item, SinkDesc
from sluice.catalog.secrets import connection_options, registry_login
from sluice.catalog.store import Catalog
from sluice.errors import ExternalSystemError, FeatureNotSupported, QueryCanceled, SqlError, StoreDamaged, UniqueViolation
from sluice.kafka.client import KafkaReadError, connection_config, watermarks
from sluice.kafka.encode import confluent_frame
from sluice.kafka.registry import SchemaRegistry
from sluice.kafka.retry import RetryPolicy
from sluice.kafka.progress import PROGRESS_CONFIG, PROGRESS_TOPIC, Progress, check_config, last_record
from sluice.kafka.topics import create_topic, list_topics, topic_config
from sluice.spark.failures import failure_reason
from sluice.spark.pyspark_code import F, SchemaIds, recorded
from sluice.storage.location import Location

# How often an idle sink looks for changes in what its relation reads.
POLL_SECONDS = 0.2
# How long a transaction may take before librdkafka aborts it (and a message not
# acknowledged within it fails); read at each use, so a test may shorten it.
TRANSACTION_TIMEOUT_MS = 60_000

STARTING, RUNNING, STALLED, FAILED = "starting", "running", "stalled", "failed"


class Message(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Change:
    """A row identity whose payload changed between two delivered snapshots: None before
    means it was added, None after that it went. `count` is how many times (a relation
    without a key may hold a row several times)."""

    identity: bytes
    before: bytes | None
    after: bytes | None
    count: int = 1


@dataclass
class Changes:
    """A step's changes, column by column as they come from Spark (`Change`s on
    iteration), with what the step found beside them: the guard flags set in some row of
    the relation (`flagged`), an identity two rows share (`duplicate`, for an envelope
    whose identities are unique), and, for a dead-letter sink, the source offsets whose
    rows it read (`read`)."""

    identity: list[bytes] = field(default_factory=list)
    before: list[bytes | None] = field(default_factory=list)
    after: list[bytes | None] = field(default_factory=list)
    count: list[int] = field(default_factory=list)
    flagged: frozenset[str] = frozenset()
    duplicate: bytes | None = None
    read: dict[str, int] | None = None
    received: int = 0  # rows the driver received to find them
    seconds: dict[str, float] = field(default_factory=dict)  # what its parts took

    def __len__(self) -> int:
        return len(self.identity)

    def __iter__(self) -> Iterator[Change]:
        return map(Change, self.identity, self.before, self.after, self.count)


class SinkEnvelope:
    """How a sink's relation rows become messages (see the module docstring). `unique`:
    whether two rows with one identity are an error of the relation (an upsert key that is
    not unique) rather than a row held twice."""

    unique: bool = True

    def prepare(self) -> None:
        """Whatever must exist before the first step (registering schemas)."""

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        raise NotImplementedError

    def messages(self, change: Change) -> Iterator[Message]:
        raise NotImplementedError

    def batch(self, changes: Changes) -> Iterable[Message]:
        """The messages of a step's changes, in order."""
        return (message for change in changes for message in self.messages(change))


def encoded(fmt: Format, frame: DataFrame, columns: tuple[str, ...], body: bool = False) -> SparkColumn:
    """`columns` of `frame` encoded by `fmt` (its unframed Avro body, with `body`), on
    the executors: JSON assembled in the JVM (see `_json_object`), any other format by an
    Arrow-batched Python UDF calling the format's encoder."""
    types = dict((f.name, f.dataType) for f in frame.schema.fields)
    if isinstance(fmt, Json):
        return _json_object(fmt, [(c, types[c]) for c in columns])
    udf = F.udf(RowBytes(fmt, body), T.BinaryType(), useArrow=True)
    return udf(F.struct(*(_jsonable(c, types[c]) for c in columns)))


# Column types whose JSON text Spark writes with exactly the bytes of `Json.value_text`:
# integers (their digits) and booleans; text too (see `_json_string`). Doubles are not
# among them: Java prints 1e16 as `1.0E16` and, before JDK 19, some doubles with more
# digits than the shortest that Python's `repr` writes.
_JVM_INTEGERS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _json_object(fmt: Json, columns: list[tuple[str, T.DataType]]) -> SparkColumn:
    """The bytes of `fmt.encode(row)`, made in the JVM: the object's braces, names and
    commas are constants, the values of integer, boolean and text columns are Spark
    expressions, and only the values of other columns (floats, numerics, dates, records,
    …) go through a Python UDF calling `fmt.value_text`."""
    parts = []
    for index, ((name, data_type), column) in enumerate(zip(columns, fmt.columns, strict=True)):
        value = _col(name)
        sql_type = column.type.name
        if sql_type in ("smallint", "integer", "bigint") and _held_as(data_type, _JVM_INTEGERS):
            text = value.cast("string")
        elif sql_type == "boolean" and _held_as(data_type, T.BooleanType):
            text = F.when(value, F.lit("true")).when(~value, F.lit("false"))
        elif sql_type == "text" and _held_as(data_type, T.StringType):
            text = _json_string(value)
        else:
            udf = F.udf(ValueText(fmt, index), T.StringType(), useArrow=True)
            text = udf(_jsonable(name, data_type))
        opening = ("," if index else "{") + json.dumps(column.name, ensure_ascii=False) + ":"
        parts += [F.lit(opening), F.coalesce(text, F.lit("null"))]
    return F.encode(F.concat(*parts, F.lit("}")) if parts else F.lit("{}"), "UTF-8")


def _held_as(data_type, kinds) -> bool:
    """Whether Spark holds a column as one of `kinds`: so its column type says, or, where
    EXPLAIN PYSPARK's recording does not know the type (no JVM), as the SQL type implies,
    so that the program printed takes the path the sink takes."""
    return isinstance(data_type, kinds) or not isinstance(data_type, T.DataType)


def _json_string(value: SparkColumn) -> SparkColumn:
    """A text value as Python's `json.dumps` writes it (ensure_ascii off). Spark's own
    (Jackson's) is the same but for control characters without a short escape, which it
    writes `\\u001F` where Python writes `\\u001f`; a value holding one is escaped here
    character by character, in the JVM still."""
    jackson = F.to_json(F.array(value))  # ["…"]
    spark_text = jackson.substr(F.lit(2), F.length(jackson) - 2)
    escaped = value
    for char in ("\\", '"', *(chr(c) for c in range(32))):
        escaped = F.replace(escaped, F.lit(char), F.lit(json.dumps(char)[1:-1]))
    python_text = F.concat(F.lit('"'), escaped, F.lit('"'))
    return F.when(value.rlike("[\\x00-\\x07\\x0b\\x0e-\\x1f]"), python_text).otherwise(spark_text)


def _col(name: str) -> SparkColumn:
    return F.col("`" + name.replace("`", "``") + "`")


@dataclass(frozen=True)
class ValueText:
    """A column's JSON text as `fmt` writes it in its object: a sink's UDF for a column
    Spark cannot write itself."""

    fmt: Json
    index: int

    def __call__(self, value) -> str:
        return self.fmt.value_text(self.index, _plain(value))


@dataclass(frozen=True)
class RowBytes:
    """A row's bytes as the format `fmt` encodes them (its unframed Avro body, with
    `body`): the function a sink's UDF calls on the executors."""

    fmt: Format
    body: bool = False

    def __call__(self, row) -> bytes | None:
        encode = self.fmt.body if self.body else self.fmt.encode
        return encode(tuple(_plain(v) for v in row))


def _jsonable(name: str, data_type: T.DataType) -> SparkColumn:
    column = _col(name)
    # A jsonb queried through a view is a VARIANT; encoders take its JSON text.
    return F.to_json(column).alias(name) if isinstance(data_type, T.VariantType) else column


def _plain(value: Any) -> Any:
    """A value as the encoders take it: records as tuples, timestamps without a zone."""
    if hasattr(value, "__fields__"):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if getattr(value, "tzinfo", None) is not None:
        from datetime import timezone

        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


class _Rows:
    """A value format's row encoding and how an envelope frames it."""

    def __init__(self, fmt: Format, registry: SchemaRegistry | None, topic: str) -> None:
        self.format = fmt
        self.registry = registry
        self.topic = topic
        self.debezium_id: int | None = None

    def register(self, debezium: bool) -> None:
        if debezium and self.format.name not in ("json", "avro"):  # planned by an older sluice
            raise FeatureNotSupported(f"ENVELOPE DEBEZIUM requires FORMAT JSON or AVRO, found FORMAT {self.format.name.upper()}")
        if not isinstance(self.format, AvroRegistry):
            return
        subject = f"{self.topic}-value"
        if debezium:
            row = json.loads(self.format.schema)
            envelope = {
                "type": "record",
                "name": "envelope",
                "fields": [{"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "row"]}],
            }
            self.debezium_id = self.registry.register(subject, json.dumps(envelope))
        else:
            self.format = replace(self.format, schema_id=self.registry.register(subject, self.format.schema))

    def column(self, frame: DataFrame, columns: tuple[str, ...]) -> SparkColumn:
        """The payload of a row: the whole value for UPSERT, the row for DEBEZIUM."""
        return encoded(self.format, frame, columns, body=self.debezium_id is not None)

    def debezium(self, before: bytes | None, after: bytes | None) -> bytes:
        if isinstance(self.format, AvroRegistry):
            union = b"".join(b"\x00" if row is None else b"\x02" + row for row in (before, after))
            return confluent_frame(self.debezium_id, union)
        return b'{"before":' + (before or b"null") + b',"after":' + (after or b"null") + b"}"


def _key_format(desc: SinkDesc, registry: SchemaRegistry | None) -> Format | None:
    fmt = desc.key_format
    if isinstance(fmt, AvroRegistry):
        return replace(fmt, schema_id=registry.register(f"{desc.topic}-key", fmt.schema))
    return fmt


class Upsert(SinkEnvelope):
    """Key: the KEY columns; value: the row; a key that went: a tombstone."""

    def __init__(self, desc: SinkDesc, rows: _Rows, registry: SchemaRegistry | None, columns: tuple[str, ...]):
        self.desc, self.rows, self.registry, self.columns = desc, rows, registry, columns
        self.key_format: Format | None = None

    def prepare(self) -> None:
        self.key_format = _key_format(self.desc, self.registry)
        self.rows.register(debezium=False)

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        return encoded(self.key_format, frame, self.desc.key), self.rows.column(frame, self.columns)

    def messages(self, change: Change) -> Iterator[Message]:
        yield Message(change.identity, change.after)

    def batch(self, changes: Changes) -> Iterable[Message]:
        return map(Message, changes.identity, changes.after)


class Debezium(SinkEnvelope):
    """Value `{"before": row, "after": row}`; keyed by the KEY columns if there are any,
    else every row is its own identity (key null) and a row held twice is written twice."""

    def __init__(self, desc: SinkDesc, rows: _Rows, registry: SchemaRegistry | None, columns: tuple[str, ...]):
        self.desc, self.rows, self.registry, self.columns = desc, rows, registry, columns
        self.key_format: Format | None = None
        self.unique = bool(desc.key)

    def prepare(self) -> None:
        self.key_format = _key_format(self.desc, self.registry)
        self.rows.register(debezium=True)

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        row = self.rows.column(frame, self.columns)
        if not self.desc.key:
            return row, row
        return encoded(self.key_format, frame, self.desc.key), row

    def messages(self, change: Change) -> Iterator[Message]:
        key = change.identity if self.desc.key else None
        for _ in range(change.count):
            yield Message(key, self.rows.debezium(change.before, change.after))


def _registry(desc: SinkDesc, catalog: Catalog) -> SchemaRegistry | SchemaIds | None:
    for fmt in (desc.key_format, desc.value_format):
        if fmt is not None and fmt.registry is not None:
            if recorded():  # EXPLAIN PYSPARK registers nothing: the ids are its program's variables
                return SchemaIds()
            connection = catalog.by_id(fmt.registry).details
            return SchemaRegistry(connection.url, *(registry_login(connection, catalog) or ()))
    return None


def _row_envelope(sink: Item, catalog: Catalog) -> SinkEnvelope:
    desc = sink.details
    relation = catalog.by_id(desc.source)
    registry = _registry(desc, catalog)
    rows = _Rows(desc.value_format, registry, desc.topic)
    columns = tuple(c.name for c in relation.columns)
    cls = Upsert if desc.envelope == "upsert" else Debezium
    return cls(desc, rows, registry, columns)


# (accepts(sink, relation), make(sink, catalog)), the first that accepts chooses.
_ENVELOPES: list[tuple[Callable[[Item, Item], bool], Callable[[Item, Catalog], SinkEnvelope]]] = []


def register_envelope(
    accepts: Callable[[Item, Item], bool], make: Callable[[Item, Catalog], SinkEnvelope]
) -> None:
    """Sink relations whose rows `accepts` become messages by the envelope `make` builds."""
    _ENVELOPES.insert(0, (accepts, make))


register_envelope(lambda sink, relation: True, _row_envelope)


def envelope_of(sink: Item, catalog: Catalog) -> SinkEnvelope:
    relation = catalog.by_id(sink.details.source)
    make = next(make for accepts, make in _ENVELOPES if accepts(sink, relation))
    return make(sink, catalog)


# ---------------------------------------------------------------- state


class SinkState:
    """What a sink delivered: `(identity, payload, count)` at each committed version, as
    Parquet under `<sink dir>/state/<version>/` — the rows whose count is above 0; a step
    on Spark writes every group, the wanted ones under `wanted=true/` with what was
    delivered before, the others under `wanted=false/` — and `complete` once every part
    is there, before the version's commit (see the module docstring)."""

    def __init__(self, root: Location) -> None:
        self.dir = root / "state"

    def path(self, version: int) -> Location:
        return self.dir / str(version)

    def upgrade(self, version: int) -> None:
        """Rewrite the state of `version` an older sluice kept as one Arrow file
        (`<version>.arrow`) as this layout's folder; the file goes once the folder is
        complete, so a crash in between leaves a state either layout reads."""
        legacy = self.dir / f"{version}.arrow"
        if version == 0 or not legacy.exists():
            return
        target = self.path(version)
        if not (target / COMPLETE).exists():
            try:
                table = pa.ipc.open_file(pa.BufferReader(legacy.read_bytes())).read_all().select(list(_ARROW_STATE))
            except (OSError, pa.ArrowInvalid) as e:
                raise self._damaged(version, e) from None
            target.remove()
            target.make_dirs()
            _write_part(table, target / "part-0.parquet")
            _complete(target)
        legacy.remove()

    def _damaged(self, version: int, error: Exception | str) -> StoreDamaged:
        return StoreDamaged(
            f"the state of the sink's committed version {version} is damaged: {error}",
            hint="DROP SINK and CREATE SINK again write the relation's whole contents anew",
        )

    def _files(self, version: int) -> list[Location]:
        """The Parquet parts of the (complete) state of `version`: in its folder, or in
        the `wanted=…` folders of a step on Spark."""
        path = self.path(version)
        if not (path / COMPLETE).exists():
            raise self._damaged(version, f'folder "{path}" is missing or incomplete')
        folders = [path, *path.children("wanted=*")]
        return [part for folder in folders for part in folder.children("part-*.parquet")]

    def _held(self, version: int) -> int:
        """At most how many identities the state of `version` holds (the rows of its parts'
        footers, which count the wanted groups a step on Spark no longer holds too)."""
        if version == 0:
            return 0
        return sum(f.parquet_rows() for f in self._files(version))

    def delivered(self, version: int) -> pa.Table:
        """`(identity, payload, count)` of what version `version` delivered, on the driver."""
        empty = pa.table({name: pa.array([], arrow_type) for name, arrow_type in _ARROW_STATE.items()})
        if version == 0:
            return empty
        parts = [f.read_parquet(list(_ARROW_STATE)) for f in self._files(version)]
        held = pa.concat_tables([empty, *parts], promote_options="default")
        return held.filter(pc.greater(held.column("count"), 0))

    def _delivered(self, spark: SparkSession, version: int) -> DataFrame | None:
        """`(identity, payload, count)` of what version `version` delivered, on Spark (None: nothing)."""
        if version == 0:
            return None
        files = [f.uri for f in self._files(version)]
        return spark.read.schema(_STATE_SCHEMA).parquet(*files).where(F.col("count") > 0) if files else None

    def diff(self, frame: DataFrame, version: int, flags: list[str], unique: bool) -> Changes:
        """Write the state of `version + 1` from `frame` — the relation's `identity`,
        `payload` and guard `flags` columns — and return how it differs from `version`'s.
        A relation and a state both of at most `SMALL` rows are diffed on the driver, in
        Arrow (a Spark shuffle costs more than that); any other on Spark."""
        target = self.path(version + 1)
        target.remove()  # what an earlier attempt at this version left
        target.make_dirs()
        began = time.perf_counter()
        if self._held(version) <= SMALL:
            probe = frame.limit(SMALL + 1).toArrow()
            if probe.num_rows <= SMALL:
                changes = self._diff_here(probe, version, flags, unique, target)
                changes.seconds = {"diffed on the driver": time.perf_counter() - began}
                return changes
        changes = self._diff_on_spark(frame, version, flags, unique, target)
        changes.seconds = {"diffed on Spark": time.perf_counter() - began}
        return changes

    def _diff_here(self, rows: pa.Table, version: int, flags: list[str], unique: bool, target: Location) -> Changes:
        delivered = self.delivered(version)
        binary, counted = pa.binary(), pa.int64()
        width, held = rows.num_rows, delivered.num_rows
        tagged = pa.concat_tables(
            [
                pa.table(
                    {
                        "identity": rows.column("identity"),
                        "payload": rows.column("payload"),
                        "count": pa.array([1] * width, counted),
                        "was_payload": pa.nulls(width, binary),
                        "was_count": pa.array([0] * width, counted),
                        **{f: rows.column(f) for f in flags},
                    }
                ),
                pa.table(
                    {
                        "identity": delivered.column("identity"),
                        "payload": pa.nulls(held, binary),
                        "count": pa.array([0] * held, counted),
                        "was_payload": delivered.column("payload"),
                        "was_count": delivered.column("count"),
                        **{f: pa.array([False] * held) for f in flags},
                    }
                ),
            ],
            promote_options="permissive",  # a flag column of the relation may be NOT NULL
        )
        aggregates = [(c, "max") for c in ("payload", "was_payload")] + [(c, "sum") for c in ("count", "was_count")]
        grouped = tagged.group_by("identity").aggregate(aggregates + [(f, "max") for f in flags])
        grouped = grouped.rename_columns(["identity" if n == "identity" else n.rsplit("_", 1)[0] for n in grouped.column_names])
        state = grouped.filter(pc.greater(grouped.column("count"), 0)).select(["identity", "payload", "count"])
        _write_part(state, target / "part-0.parquet")
        _complete(target)
        return _changes(grouped, flags, unique, received=width + held)

    def _diff_on_spark(self, frame: DataFrame, version: int, flags: list[str], unique: bool, target: Location) -> Changes:
        """The relation's pairs and the delivered state grouped by identity, written as
        the new state in one Spark job, in two folders by whether the driver wants a group
        (changed, a duplicate key, or flagged): `wanted=true` alone is read back, O(change)."""
        binary, counted = T.BinaryType(), T.LongType()
        rows = frame.select(
            "identity",
            "payload",
            F.lit(1).cast(counted).alias("count"),
            F.lit(None).cast(binary).alias("was_payload"),
            F.lit(0).cast(counted).alias("was_count"),
            *flags,
        )
        delivered = self._delivered(frame.sparkSession, version)
        if delivered is not None:
            rows = rows.unionByName(
                delivered.select(
                    "identity",
                    F.lit(None).cast(binary).alias("payload"),
                    F.lit(0).cast(counted).alias("count"),
                    F.col("payload").alias("was_payload"),
                    F.col("count").cast(counted).alias("was_count"),
                    *(F.lit(False).alias(f) for f in flags),
                )
            )
        grouped = rows.groupBy("identity").agg(
            *(F.max(c).alias(c) for c in ("payload", "was_payload")),
            *(F.sum(c).alias(c) for c in ("count", "was_count")),
            *(F.max(f).alias(f) for f in flags),
        )
        count, was = F.col("count"), F.col("was_count")
        changed = (count != was) | ~F.col("payload").eqNullSafe(F.col("was_payload"))
        wanted = changed | (count > 1) if unique else changed
        for flag in flags:
            wanted = wanted | F.col(flag)
        marked = grouped.withColumn("wanted", wanted).withColumn(
            "was_payload", F.when(F.col("wanted"), F.col("was_payload"))
        )
        marked.write.mode("overwrite").partitionBy("wanted").parquet(target.uri)
        wanted_parts = [f.uri for f in (target / "wanted=true").children("part-*.parquet")]
        found = frame.sparkSession.read.schema(marked.drop("wanted").schema).parquet(*wanted_parts).toArrow()
        _complete(target)
        return _changes(found, flags, unique, received=found.num_rows)

    def keep_only(self, version: int) -> None:
        for path in self.dir.children():
            if path.name != str(version):
                path.remove()


# The largest relation (and delivered state) a step diffs on the driver.
SMALL = 1000

_STATE_SCHEMA = T.StructType(
    [
        T.StructField("identity", T.BinaryType()),
        T.StructField("payload", T.BinaryType()),
        T.StructField("count", T.LongType()),
    ]
)


# Written last into a state's folder: every part of it is there and fsynced.
COMPLETE = "complete"


def _write_part(table: pa.Table, path: Location) -> None:
    """`table` as the Parquet file `path`, written crash-safely."""
    out = pa.BufferOutputStream()
    pq.write_table(table, out)
    path.replace(out.getvalue().to_pybytes())


def _complete(folder: Location) -> None:
    for part in folder.children("part-*.parquet"):
        part.sync()
    folder.sync()
    (folder / COMPLETE).replace(b"")


_ARROW_STATE = {"identity": pa.binary(), "payload": pa.binary(), "count": pa.int64()}


def _changes(found: pa.Table, flags: list[str], unique: bool, received: int) -> Changes:
    """The changes of the rows a step wanted (see `SinkState.diff`), worked out by Arrow:
    an identity new or gone, a payload replaced, or a row held more or fewer times."""
    payload, was_payload = found.column("payload"), found.column("was_payload")
    count, was = found.column("count"), found.column("was_count")
    same = pc.or_(pc.fill_null(pc.equal(payload, was_payload), False), pc.and_(payload.is_null(), was_payload.is_null()))
    differs = pc.and_(pc.invert(same), pc.and_(pc.greater(count, 0), pc.greater(was, 0)))
    changed = pc.or_(pc.not_equal(count, was), pc.invert(same))
    nothing = pa.nulls(len(found), pa.binary())
    table = pa.table(
        {
            "identity": found.column("identity"),
            "before": pc.if_else(pc.or_(differs, pc.less(count, was)), was_payload, nothing),
            "after": pc.if_else(pc.or_(differs, pc.greater(count, was)), payload, nothing),
            "n": pc.if_else(differs, pa.scalar(1, pa.int64()), pc.abs(pc.subtract(count, was))),
        }
    ).filter(changed)
    duplicates = found.filter(pc.greater(count, 1)).column("identity").to_pylist() if unique else []
    return Changes(
        *(table.column(c).to_pylist() for c in ("identity", "before", "after", "n")),
        flagged=frozenset(f for f in flags if pc.any(found.column(f)).as_py()),
        duplicate=min(duplicates, default=None),
        received=received,
    )


# ---------------------------------------------------------------- Kafka


def sink_identity(root: Location) -> str:
    """The sink's name on Kafka — its transactional id and progress key —
    `sluice-sink-<uuid>`, made when it first starts and kept in `<sink dir>/identity`: a
    catalog id names a sink in its data directory only, and two data directories' sinks
    sharing a progress key would resume from each other's progress."""
    path = root / "identity"
    try:
        return path.read_text()
    except FileNotFoundError:
        identity = f"sluice-sink-{uuid.uuid4().hex}"
        path.replace(identity.encode())
        return identity


class _Reports:
    """The delivery reports of a step's messages: per partition the first and last offset
    written and how many, and the first failure."""

    def __init__(self) -> None:
        self.written: dict[int, tuple[int, int, int]] = {}
        self.count = 0
        self.failure: str | None = None

    def __call__(self, error, message) -> None:
        if error is not None:
            self.failure = self.failure or error.str()
            return
        partition, offset = message.partition(), message.offset()
        first, last, count = self.written.get(partition, (offset, offset, 0))
        self.written[partition] = (min(first, offset), max(last, offset), count + 1)
        self.count += 1


class Delivery:
    """A sink's transactional producer, its topics and its progress records."""

    def __init__(self, sink: Item, catalog: Catalog, identity: str) -> None:
        self.sink = sink
        self.identity = identity
        self.desc: SinkDesc = sink.details
        connection = catalog.by_id(self.desc.connection).details
        self.bootstrap = ",".join(connection.brokers)
        self.config = connection_config(connection_options(connection, catalog).all())
        self.progress_key = identity.encode()
        self.producer = None

    def open(self) -> Progress:
        """Create the topics if missing, check the progress topic's configuration, fence
        any earlier producer of this sink, and read the last committed progress."""
        from confluent_kafka import Producer

        existing = list_topics(self.bootstrap, self.config)
        topics = ((self.desc.topic, self.desc.partition_count or 1, None), (PROGRESS_TOPIC, 1, PROGRESS_CONFIG))
        for topic, partitions, settings in topics:
            if topic not in existing:
                try:
                    create_topic(self.bootstrap, topic, partitions, self.config, settings)
                except ExternalSystemError:
                    if topic not in list_topics(self.bootstrap, self.config):  # not a race lost
                        raise
        configs = topic_config(self.bootstrap, PROGRESS_TOPIC, self.config)
        if configs is not None:  # None: an embedded broker, which keeps none (kafka/progress.py)
            check_config(configs)
        self.producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.identity,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                **self.config,
            }
        )
        self.producer.init_transactions(30)
        return self._verified(self._last_progress())

    def _last_progress(self) -> Progress:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.identity,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                **self.config,
            }
        )
        try:
            found = last_record(consumer, self.progress_key)
        finally:
            consumer.close()
        return Progress() if found is None else found[0]

    def _verified(self, progress: Progress) -> Progress:
        """`progress`, once the messages it says its step wrote are in the sink's topic: a
        record naming offsets past a partition's end (the topic deleted and made again,
        the broker's data lost) is not trusted, and the sink does not start on it."""
        if not progress.written:
            return progress
        topic = self.desc.topic
        try:
            marks = watermarks(self.bootstrap, topic, self.config)
        except KafkaReadError as e:
            raise ExternalSystemError(f"cannot read topic '{topic}': {e}") from None
        for partition, (_first, last, _count) in sorted(progress.written.items()):
            end = marks.get(int(partition), (0, 0))[1]
            if end <= last:
                raise ExternalSystemError(
                    f"the sink's progress record names offset {last} of partition {partition} of topic '{topic}',"
                    f" which ends at offset {end}: the topic lost messages the sink wrote"
                )
        return progress

    def deliver(self, messages: Iterable[Message], progress: Progress, read: dict[str, int] | None) -> Progress:
        """Write `messages` and the progress record after them in one transaction; the
        progress as committed (rows written, what the step wrote per partition, `read`).
        The record is written only once every message is acknowledged: a message not
        delivered (a broker away past the transaction's timeout), like a commit that
        fails, aborts the transaction, and the step is done again from the last committed
        state."""
        from confluent_kafka import KafkaException

        producer, topic = self.producer, self.desc.topic
        timeout = TRANSACTION_TIMEOUT_MS / 1000
        reports = _Reports()
        written = 0
        try:
            producer.begin_transaction()
            for message in messages:
                self._produce(topic, message, reports)
                written += 1
            producer.flush(timeout)
            if reports.failure is not None or reports.count != written:
                failure = reports.failure or f"{written - reports.count} of {written} messages not acknowledged"
                raise ExternalSystemError(f"cannot write to topic '{topic}': {failure}")
            committed = Progress(
                progress.version + 1,
                progress.rows + written,
                max((last for _, last, _ in reports.written.values()), default=progress.offset),
                read,
                topic,
                {str(p): list(span) for p, span in sorted(reports.written.items())},
            )
            producer.produce(PROGRESS_TOPIC, key=self.progress_key, value=committed.to_json())
            producer.commit_transaction(timeout)
        except KafkaException as e:
            self._abort()
            raise ExternalSystemError(f"cannot write to topic '{topic}': {e.args[0].str()}") from None
        except BaseException:
            self._abort()
            raise
        return committed

    def _produce(self, topic: str, message: Message, on_delivery) -> None:
        key, value, headers = message
        headers = list(headers) if headers else None  # the client takes a list, not a tuple
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _abort(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self.producer.abort_transaction(10)
        except KafkaException:
            self.producer = None  # fatal: the next start makes a new one

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(5)
            self.producer = None


# ---------------------------------------------------------------- the job


@dataclass
class Status:
    """A sink's status; `received`: how many changes its last step brought to the
    driver (see the module docstring: what a step costs beyond Spark)."""

    state: str = STARTING
    rows: int = 0
    offset: int | None = None
    error: str | None = None
    received: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # the last step's parts'


# evaluate(envelope, state, progress): the changes of the relation since `progress`, its
# new state written as `state`'s next version; raises the relation's error.
Evaluate = Callable[[SinkEnvelope, SinkState, Progress], Changes]


@dataclass
class SinkJob:
    """One sink's loop, on a thread of its own: wait for a change of what the relation
    reads, evaluate its changes, deliver them. `version()` changes when what it reads may
    have changed."""

    sink: Item
    catalog: Catalog
    root: Location
    evaluate: Evaluate
    version: Callable[[], Any]
    status: Status = field(default_factory=Status)
    # Drain requests: each asks for one evaluation begun after it; `answered` counts the
    # requests the last finished evaluation began after.
    asked: int = 0
    answered: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def ask(self) -> int:
        with self._changed:
            self.asked += 1
            return self.asked

    def answered_after(self, number: int, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(
                lambda: self.answered >= number or not self._thread.is_alive(),
                max(timeout, 0),
            )

    def _answer(self, number: int) -> None:
        with self._changed:
            self.answered = max(self.answered, number)
            self._changed.notify_all()

    def start(self) -> None:
        thread = threading.Thread(target=self._run, name=f"sluice-sink-{self.sink.name}", daemon=True)
        thread.start()
        self._thread = thread  # published started: `stop` may join it

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        retry = RetryPolicy(DEFAULT_RETRY_TIMEOUT_MS / 1000, DEFAULT_RETRY_DELAY_MAX_MS / 1000, self.sink.name)
        delays = retry.delays()
        while not self._stop.is_set():
            delivery = None
            try:
                # Inside: writing its identity may fail too (a full disk), and is retried.
                delivery = Delivery(self.sink, self.catalog, sink_identity(self.root))
                self._deliver_changes(delivery)
                return
            except Exception as e:  # noqa: BLE001 - a fault fails the sink until a retry gets through
                self.status.state = FAILED
                self.status.error = e.message if isinstance(e, SqlError) else failure_reason(e, str(self.root))
            finally:
                if delivery is not None:
                    delivery.close()
            self._stop.wait(next(delays))

    def _deliver_changes(self, delivery: Delivery) -> None:
        state = SinkState(self.root)
        envelope = envelope_of(self.sink, self.catalog)
        envelope.prepare()
        progress = delivery.open()
        state.upgrade(progress.version)
        state.keep_only(progress.version)
        self.status.rows, self.status.offset = progress.rows, progress.offset
        seen = object()
        while not self._stop.is_set():
            asked = self.asked
            version = self.version()
            if version == seen and asked == self.answered:
                self._stop.wait(POLL_SECONDS)
                continue
            started = time.perf_counter()
            try:
                changes = self.evaluate(envelope, state, progress)
                if envelope.unique and changes.duplicate is not None:
                    raise UniqueViolation(
                        f"the sink's key is not unique in its relation: two rows have the key {changes.duplicate!r}"
                    )
            except (ExternalSystemError, QueryCanceled):
                raise  # a fault, not the relation's error: the sink fails and retries
            except SqlError as e:  # the relation's error: nothing past it is written
                state.keep_only(progress.version)
                self.status = Status(STALLED, progress.rows, progress.offset, e.message)
                seen = version
                self._answer(asked)
                continue
            began = time.perf_counter()
            if changes:
                progress = delivery.deliver(envelope.batch(changes), progress, changes.read)
                # What SHOW SINKS tells of the sink while no session runs it.
                (self.root / "progress.json").replace(progress.to_json())
            state.keep_only(progress.version)
            seconds = {"evaluated": began - started, **changes.seconds, "delivered": time.perf_counter() - began}
            self.status = Status(RUNNING, progress.rows, progress.offset, received=changes.received, seconds=seconds)
            seen = version
            self._answer(asked)


class Sinks:
    """The running sinks of one session, each under `<data dir>/sinks/<id>/`."""

    def __init__(self, data: Location) -> None:
        self.root = data / "sinks"
        self.jobs: dict[str, SinkJob] = {}

    def start(self, sink: Item, catalog: Catalog, evaluate, version) -> None:
        if sink.id not in self.jobs:
            job = SinkJob(sink, catalog, self.root / sink.id, evaluate, version)
            self.jobs[sink.id] = job
            job.start()

    def status(self, sink_id: str) -> Status | None:
        job = self.jobs.get(sink_id)
        return None if job is None else job.status

    def drain(self, timeout: float) -> None:
        """Wait (up to `timeout` seconds) until every sink has delivered what its relation
        holds now, or is stalled on its error; a failed sink is waited for as it retries."""
        asked = [(job, job.ask()) for job in self.jobs.values()]
        deadline = time.monotonic() + timeout
        for job, number in asked:
            job.answered_after(number, deadline - time.monotonic())

    def drop(self, sink_id: str) -> None:
        job = self.jobs.pop(sink_id, None)
        if job is not None:
            job.stop()
        with contextlib.suppress(OSError):
            (self.root / sink_id).remove()

    def close(self) -> None:
        for job in self.jobs.values():
            job._stop.set()
        for job in self.jobs.values():
            job.stop()
        self.jobs.clear()
