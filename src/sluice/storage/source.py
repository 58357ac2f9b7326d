"""A Kafka source as a pair of DataFrames: oks (the source's rows) and errs (its errors).

One read of the topic feeds both: the reader decodes the formats Spark does not decode
natively (JSON, CSV, Avro) in its Python pass, each format's description (the format
registry, `catalog/formats.py`) saying how, and every message ends up in exactly one of
oks, errs, or the documented skip (ENVELOPE NONE: a message without a value, unless
INCLUDE KEY reads its key).

errs rows are `(kind, code, message, partition, offset, timestamp, key, value)`, `message`
being the full text a query over the source fails with and `code` its SQLSTATE.

What a snapshot of a source reads — its offset ranges, from its start to the high
watermarks when a statement starts — is fixed here too (`snapshot_read`).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType

from sluice.catalog.formats import Format, FormatDesc
from sluice.catalog.items import Item, SourceDesc
from sluice.catalog.secrets import connection_options, registry_login
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.errors import (
    DECODE_ERROR,
    MISSING_KEY_OR_VALUE,
    OFFSETS_LOST,
    SOURCE_ERROR,
    InternalError,
    SourceFailed,
)
from sluice.kafka.client import (
    KafkaReadError,
    connection_config,
    offsets_for_timestamp,
    watermarks,
)
from sluice.kafka.retry import RetryPolicy, SourceUnavailable
from sluice.spark.kafka_source import LOST_RANGE, NAME, decode_spec
from sluice.spark.pyspark_code import F, Window

ERRS_COLUMNS = ("kind", "code", "message", "partition", "offset", "timestamp", "key", "value")
FLAT_VALUE_MISSING = "Envelope error: Flat: Value not present for message"


class Collection(Protocol):
    """A source as its rows and its errors: read from its topic (`KafkaCollection`), or
    from the files its ingestion committed (`stored.StoredCollection`)."""

    @property
    def oks(self) -> DataFrame: ...

    @property
    def errs(self) -> DataFrame:
        """Errors a query over the collection fails with. For ENVELOPE UPSERT these are the
        errors still standing: a later good value, or a tombstone, retracts a key's error."""

    @property
    def base(self) -> DataFrame:
        """The decoded read everything derives from: cached when it is used more than once,
        so the topic is read once."""

    @property
    def log(self) -> DataFrame:
        """Every error message ever seen, retracted or not: what a dead-letter table logs
        and what ERROR TOLERANCE counts. For ENVELOPE NONE it is `errs`."""

    @property
    def dead_letters(self) -> DataFrame | None:
        """A continuously ingested source's dead-letter rows, stamped when their
        micro-batch was ingested (a snapshot has none: its dead-letter rows derive from `log`)."""

    @property
    def observable(self) -> Observable | None: ...

    @property
    def errorless(self) -> bool:
        """Known to have no errors, without reading it: a query over it needs no guard."""


@dataclass(frozen=True)
class KafkaCollection:
    """A source's `Collection` as a read of its topic makes it."""

    oks: DataFrame
    errs: DataFrame
    base: DataFrame
    log: DataFrame
    dead_letters: DataFrame | None = None
    observable: Observable | None = None
    errorless: bool = False


@dataclass(frozen=True)
class Observable:
    """A read of Kafka: its oks made from any plan over its `base` (the messages), and
    how many offsets the read covers. A query observing `base` on its way to the oks
    that counts that many messages has seen every one: if none is an error, the source
    has none (an upsert source's standing errors are some of its messages' errors)."""

    rows_of: Callable[[DataFrame], DataFrame]
    offsets: int


@dataclass(frozen=True)
class SourceRead:
    """What a snapshot reads: per partition `[start, end)`. A start below the partition's
    low watermark (`lows`: per partition, the first offset retention kept when the read
    was fixed) is kept: the reader reports the range retention deleted. `highs`: per
    partition, its high watermark then (an end is never below its start)."""

    ranges: tuple[tuple[int, int, int], ...]
    lows: tuple[tuple[int, int], ...] = ()
    highs: tuple[tuple[int, int], ...] = ()

    def ranges_option(self):
        """The reader's `ranges` option."""
        return json.dumps([list(r) for r in self.ranges])

    def offsets(self):
        """How many offsets the read covers."""
        return sum(end - start for _, start, end in self.ranges)


def render_source(spark: SparkSession, item: Item, catalog: Catalog, read: SourceRead) -> Collection:
    """The source's collection as `read` reads it. Rendering is a pure function of the
    source, its reader's options and the offsets, and costs a query tens of calls into
    the JVM per column: a snapshot of a topic that has not moved reuses the frames (which
    read Kafka again each time they run)."""
    return _rendered(spark, item, tuple(reader_options(item.source_desc, catalog).items()), read)


@functools.lru_cache(maxsize=64)
def _rendered(spark: SparkSession, item: Item, options: tuple[tuple[str, str], ...], read: SourceRead) -> Collection:
    desc = item.source_desc
    raw = (
        spark.read.format(NAME)
        .options(**dict(options))
        .option("retry", retry_policy(item).to_json())
        .option("ranges", read.ranges_option())
        .load()
    )
    messages = source_messages(with_decode_errors(raw, desc), desc)
    parts = source_parts(messages, desc, item)
    offsets = read.offsets()
    if desc.envelope == "none":
        # What a query caches to read the topic once: only what rows and errors are made of.
        kept = messages.select(*state_columns(messages, desc))
        errs = kept.where(parts.failed).select(*parts.errs)

        def rows_of(base: DataFrame) -> DataFrame:
            return base.where(parts.ok).select(*parts.oks)

        return KafkaCollection(rows_of(kept), errs, kept, errs, observable=Observable(rows_of, offsets))

    def state_of(base: DataFrame) -> DataFrame:
        # The winning message of an upsert key: the latest by partition, then offset.
        latest = Window.partitionBy("__ukey").orderBy(F.desc("partition"), F.desc("offset"))
        return base.withColumn("__rank", F.row_number().over(latest)).where((F.col("__rank") == 1) & ~parts.skipped)

    state = state_of(messages)
    state_parts = source_parts(state, desc, item)

    def state_rows(state: DataFrame) -> DataFrame:
        return state.where(state_parts.ok).select(*state_parts.oks)

    return KafkaCollection(
        state_rows(state),
        state.where(state_parts.failed).select(*state_parts.errs),
        messages,
        messages.where(parts.failed).select(*parts.errs),
        observable=Observable(lambda base: state_rows(state_of(base)), offsets),
    )


def reader_options(desc: SourceDesc, catalog: Catalog) -> dict[str, str]:
    """The `sluice_kafka` options that read and decode the source's topic. Credentials
    travel in options whose names Spark's `spark.redaction.regex` matches (`secret`), so
    plans and logs show them redacted."""
    connection = catalog.by_id(desc.connection).connection_desc
    kafka = connection_options(connection, catalog)
    decode, logins = {}, {}
    for side, fmt in _sides(desc).items():
        if fmt.native is not None:
            continue
        registry = None if fmt.registry is None else catalog.by_id(fmt.registry).connection_desc
        decode[side] = decode_spec(fmt, None if registry is None else registry.url)
        login = None if registry is None else registry_login(registry, catalog)
        if login is not None:
            logins[side] = login
    options = {
        "bootstrap": ",".join(connection.brokers),
        "topic": desc.topic,
        "config": json.dumps(client_config(desc, kafka.clear)),
        "decode": json.dumps(decode),
        "report_lost": "true",
    }
    if kafka.secret:
        options["config_secret"] = json.dumps(connection_config(kafka.secret))
    if logins:
        options["decode_secret"] = json.dumps(logins)
    return options


def client_config(desc: SourceDesc, options: dict[str, str]) -> dict[str, str]:
    """The librdkafka configuration of the source's clients: its connection's `options`
    (OPTION NAME → value), and its TOPIC METADATA REFRESH INTERVAL."""
    config = connection_config(options)
    if desc.topic_metadata_refresh_interval_ms is not None:
        config["topic.metadata.refresh.interval.ms"] = str(desc.topic_metadata_refresh_interval_ms)
    return config


def retry_policy(item: Item) -> RetryPolicy:
    """How reads of the source wait out transient faults (its RETRY TIMEOUT and RETRY
    DELAY MAX), naming it in the failure they raise past them."""
    desc = item.source_desc
    return RetryPolicy(desc.retry_timeout_ms / 1000, desc.retry_delay_max_ms / 1000, item.name)


def _sides(desc: SourceDesc) -> dict[str, FormatDesc]:
    sides = {"value": desc.value_format}
    # The key is decoded when it is a column, and for DEBEZIUM, whose errors name it.
    if desc.key_format is not None and (desc.key_columns or desc.envelope == "debezium"):
        sides["key"] = desc.key_format
    return sides


def with_decode_errors(raw: DataFrame, desc: SourceDesc) -> DataFrame:
    """The raw messages with `__key_error` / `__value_error`: decode error texts, without
    the `Decode error: ` prefix."""
    sides = _sides(desc)
    key_error = _error(raw, "key", sides["key"]) if "key" in sides else F.lit(None)
    return raw.withColumn("__key_error", key_error.cast("string")).withColumn(
        "__value_error", _error(raw, "value", desc.value_format)
    )


def _row_columns(decoded: DataFrame, desc: SourceDesc, item: Item, inline=None) -> list:
    """The source's columns, in order, named as the catalog names them."""
    columns = []
    if desc.key_columns:
        keys = _side_columns(decoded, "key", _key_format(desc))
        if desc.key_packed:
            # Fields named as the record's type says; an absent key is a NULL record.
            fields = _column(item, desc.key_columns[0]).type.fields
            record = F.struct(*(k.alias(f.name) for k, f in zip(keys, fields)))
            keys = [F.when(F.col("key").isNotNull(), record)]
        columns += keys
    if inline is not None:
        columns.append(inline)
    if desc.envelope == "debezium":
        after = F.col("value_data")["after"]
        names = _struct(_struct(decoded.schema["value_data"].dataType)["after"].dataType).fieldNames()
        values = _as_typed([after[name] for name in names], desc.value_format.debezium_columns(None))
    else:
        values = _side_columns(decoded, "value", desc.value_format)
    if inline is not None:
        # A value that failed to decode shows as NULLs beside its inline error, whatever
        # its format could make of its bytes (TEXT would make a lossy string of them).
        values = [F.when(F.col("__value_error").isNull(), v) for v in values]
    columns += values
    columns += [F.col(_METADATA[kind]) for kind, _ in desc.metadata]
    return [c.alias(column.name) for c, column in zip(columns, item.columns, strict=True)]


UPSERT_NULL_KEY = (
    "Envelope error: Upsert: Null key: record with NULL key in UPSERT source; to retract "
    "this error, produce a record upstream with a NULL key and NULL value"
)



def source_messages(decoded: DataFrame, desc: SourceDesc) -> DataFrame:
    """Per message: `__error` (the full text a query would fail with, or NULL), `__code`
    and `__kind`. ENVELOPE NONE errors are permanent; upsert errors are keyed.

    Upsert (and DEBEZIUM, keyed by the Kafka key with the `after` record as the row, a NULL
    `after` deleting like a tombstone): a key's value error stands until a later good value
    or a tombstone; a key that does not decode is keyed by its raw bytes and a NULL key by
    NULL, each retracted by a NULL value under the same key.
    """
    key_error, value_error = F.col("__key_error"), F.col("__value_error")
    if desc.envelope == "none":
        # Materialize's presence table: a value error first, then a key error, then a key
        # with no value; a message with neither is skipped. Without INCLUDE KEY the key is
        # not read at all (never decoded), so a key with no value is skipped too.
        value_missing = F.col("value").isNull() & F.lit(bool(desc.key_columns)) & F.col("key").isNotNull()
        error = (
            F.when(value_error.isNotNull(), F.concat(F.lit("Decode error: "), value_error))
            .when(key_error.isNotNull(), F.concat(F.lit("Decode error: "), key_error))
            .when(value_missing, F.lit(FLAT_VALUE_MISSING))
        )
        flat = value_missing & value_error.isNull() & key_error.isNull()
        code = F.when(flat, F.lit(MISSING_KEY_OR_VALUE)).otherwise(F.lit(DECODE_ERROR))
        kind = F.when(flat, F.lit("envelope")).otherwise(F.lit("decode"))
        return _with_lost_ranges(
            decoded.select("*", error.alias("__error"), code.alias("__code"), kind.alias("__kind"))
        )
    if desc.envelope == "debezium":
        deleted = F.col("value").isNull() | (
            value_error.isNull() & F.col("value_data")["after"].isNull()
        )
        decoded = decoded.withColumn("value", F.when(~deleted, F.col("value")))
    message = (
        F.when(F.col("key").isNull(), F.lit(UPSERT_NULL_KEY))
        .when(key_error.isNotNull(), F.concat(F.lit("Envelope error: Upsert: Key decode: "), key_error))
        .when(
            value_error.isNotNull() & F.lit(desc.propagate_value_errors),
            F.concat(
                F.lit("Envelope error: Upsert: Value error: "),
                value_error,
                F.lit(", decoded key: "),
                _key_repr(decoded, desc),
            ),
        )
    )
    code = F.when(F.col("key").isNull(), F.lit(MISSING_KEY_OR_VALUE)).otherwise(F.lit(DECODE_ERROR))
    # The upsert key: the decoded key (so two spellings of one JSON key are one key); a key
    # that does not decode is keyed by its raw bytes, and NULL by itself.
    ukey = (
        F.when(F.col("key").isNull(), F.lit(b"\x00"))
        .when(key_error.isNotNull(), F.concat(F.lit(b"\x01"), F.col("key")))
        .otherwise(F.concat(F.lit(b"\x02"), F.encode(_key_repr(decoded, desc), "UTF-8")))
    )
    return _with_lost_ranges(decoded.select(
        "*",
        F.when(F.col("value").isNotNull(), message).alias("__error"),
        code.alias("__code"),
        F.lit("envelope").alias("__kind"),
        ukey.alias("__ukey"),
    ))


def _with_lost_ranges(messages: DataFrame) -> DataFrame:
    """A range retention deleted before it was read (the reader's `lost_end` row) is a
    permanent source error: an upsert source keys it by its own position, so no later
    message retracts it."""
    lost = F.col("lost_end").isNotNull()
    text = F.format_string(
        SOURCE_ERROR + "topic '%s' partition %d: " + LOST_RANGE, "topic", "partition", "offset", F.col("lost_end") - 1
    )
    replaced = {
        "__error": F.when(lost, text).otherwise(F.col("__error")),
        "__code": F.when(lost, F.lit(OFFSETS_LOST)).otherwise(F.col("__code")),
        "__kind": F.when(lost, F.lit("source")).otherwise(F.col("__kind")),
    }
    if "__ukey" in messages.columns:
        position = F.format_string("%d:%d", "partition", "offset")
        replaced["__ukey"] = F.when(lost, F.concat(F.lit(b"\x03"), F.encode(position, "UTF-8"))).otherwise(
            F.col("__ukey")
        )
    return messages.withColumns(replaced)


def state_columns(messages: DataFrame, desc: SourceDesc) -> list[SparkColumn]:
    """What an upsert source's state operator carries per message: only what its rows and
    errors are made of (every column costs a conversion into Python and back). A value the
    reader decoded is needed raw only where an error shows it: elsewhere it keeps just its
    non-NULL-ness. Headers go along where a column or a dead-letter row shows them."""
    unused = {"topic", "timestampType", "key_error", "value_error", "lost_end"}
    if "HEADERS" not in {kind for kind, _ in desc.metadata} and desc.dead_letter_table is None:
        unused.add("headers")
    value = F.col("value")
    if desc.value_format.native is None:
        value = F.when(F.col("__error").isNotNull() | value.isNull(), value).otherwise(F.lit(b""))
    return [value.alias(c) if c == "value" else F.col(c) for c in messages.columns if c not in unused]


def latest_per_key(desc: SourceDesc) -> dict[str, str]:
    """The reader's `latest_per_key` option for an upsert source's stream (see
    `kafka.reader`): how to find the messages whose errors the stream must see even when a
    later message of their key supersedes them — a key that does not decode, and a value
    that does not when value errors are errors (PROPAGATE; an INLINE error is the row's)."""
    sides = _sides(desc)
    if not desc.propagate_value_errors:
        del sides["value"]
    return {
        side: "utf8" if fmt.native == "utf8" else "decoded" for side, fmt in sorted(sides.items()) if fmt.native != "bytes"
    }


def deletes() -> SparkColumn:
    """Whether an upsert message removes its key: a NULL value that is not a lost range."""
    return F.col("value").isNull() & F.col("__error").isNull()


@dataclass
class SourceParts:
    """Conditions and projections over `source_messages` rows (for an upsert source, over
    the rows of its state): whether a row is in oks, in errs, or skipped, and its oks and
    errs columns."""

    ok: SparkColumn
    failed: SparkColumn
    skipped: SparkColumn  # ENVELOPE NONE: dropped; upsert: removes its key
    oks: list[SparkColumn]
    errs: list[SparkColumn]


def source_parts(messages: DataFrame, desc: SourceDesc, item: Item) -> SourceParts:
    failed = F.col("__error").isNotNull()
    errs = [
        F.col("__kind").alias("kind"),
        F.col("__code").alias("code"),
        F.col("__error").alias("message"),
        *ERRS_COLUMNS[3:],
    ]
    if desc.envelope == "none":
        skipped = F.col("value").isNull() & ~failed
        return SourceParts(~skipped & ~failed, ~skipped & failed, skipped, _row_columns(messages, desc, item), errs)
    value_error = F.col("__value_error")
    inline = None
    if desc.inline_error_column is not None:
        inline = F.when(value_error.isNotNull(), F.struct(value_error.alias("description")))
    good_key = F.col("key").isNotNull() & F.col("__key_error").isNull()
    shown = good_key & (value_error.isNull() | F.lit(inline is not None))
    oks = _row_columns(messages, desc, item, inline)
    return SourceParts(shown, failed, deletes(), oks, errs)


def _key_repr(decoded: DataFrame, desc: SourceDesc):
    """`Row{[…]}` of the decoded key, in Materialize's datum notation."""
    parts = []
    for column in _side_columns(decoded, "key", _key_format(desc)):
        text = column.cast("string")
        parts.append(F.concat(F.lit('String("'), F.coalesce(text, F.lit("NULL")), F.lit('")')))
    return F.concat(F.lit("Row{["), F.concat_ws(", ", *parts), F.lit("]}"))


_METADATA = {"PARTITION": "partition", "OFFSET": "offset", "TIMESTAMP": "timestamp", "HEADERS": "headers"}


def _error(raw: DataFrame, side: str, fmt: Format) -> SparkColumn:
    """A side's decode error text: what the reader found, or Spark's own check."""
    if fmt.native == "utf8":
        text = F.col(side).cast("string")
        return F.when(
            F.col(side).isNotNull() & ~F.is_valid_utf8(text),
            F.concat(
                F.lit('Failed to decode UTF-8 (original bytes: "'),
                F.lower(F.hex(F.col(side))),
                F.lit('")'),
            ),
        )
    if fmt.native == "bytes":
        return F.lit(None).cast("string")
    return F.col(f"{side}_error")


def _side_columns(raw: DataFrame, side: str, fmt: Format) -> list[SparkColumn]:
    """A side's columns, unpacked from its decoded value as its format says."""
    if fmt.native == "utf8":
        value = F.col(side).cast("string")
    elif fmt.native == "bytes":
        value = F.col(side)
    else:
        value = F.col(f"{side}_data")
    if fmt.unpack == "value":
        return [value]
    if fmt.unpack == "variant":
        return [F.parse_json(value)]
    if fmt.unpack == "items":
        return [value[i] for i in range(len(fmt.columns))]
    struct = _struct(raw.schema[f"{side}_data"].dataType)
    columns = []
    for name in struct.fieldNames():
        field_type = struct[name].dataType
        branches = field_type.fieldNames() if isinstance(field_type, StructType) else []
        if branches and all(b.startswith("branch") for b in branches):
            columns += [value[name][b] for b in branches]
        else:
            columns.append(value[name])
    return _as_typed(columns, fmt.columns)


def _key_format(desc: SourceDesc) -> FormatDesc:
    """The format of the key of a source that reads its key (its planner gave it one)."""
    if desc.key_format is None:
        raise InternalError.bug("a source reading its key without a key format")
    return desc.key_format


def _column(item: Item, name: str) -> Column:
    """The column `name` of the source, which its description names."""
    column = item.column(name)
    if column is None:
        raise InternalError.bug(f'source "{item.name}" has no column "{name}", which its description names')
    return column


def _struct(data_type: DataType) -> StructType:
    """A decoded record's type, which the reader's schema makes a struct (a recording
    knows it too: see `pyspark_code`)."""
    if not isinstance(data_type, StructType):
        raise InternalError.bug(f"a decoded record of type {data_type}")
    return data_type


def _as_typed(fields: list[SparkColumn], columns) -> list[SparkColumn]:
    """Record fields as their columns: a jsonb column (a Debezium JSON string, which the
    decoder checked is a JSON document) is the string made a variant."""
    return [F.parse_json(f) if c.type.name == "jsonb" else f for f, c in zip(fields, columns, strict=True)]


def snapshot_read(catalog: Catalog, item_id: str) -> SourceRead:
    """The offset ranges a snapshot of the source reads: from the source's start (START
    OFFSET / TIMESTAMP, else where its topic began when it was created) to the high
    watermarks now. A start that retention has since deleted stays: the reader reports it.
    Transient faults are waited out up to the source's RETRY TIMEOUT."""
    item = catalog.by_id(item_id)
    desc = item.source_desc
    connection = catalog.by_id(desc.connection).connection_desc
    brokers = ",".join(connection.brokers)
    try:
        config = client_config(desc, connection_options(connection, catalog).all())
        retry = retry_policy(item)
        marks = watermarks(brokers, desc.topic, config, retry)
        starts = dict(desc.retained_from)
        if desc.start_timestamp is not None:
            at = desc.start_timestamp
            if at < 0:  # relative to now, as Materialize reads a negative START TIMESTAMP
                at += int(time.time() * 1000)
            starts = offsets_for_timestamp(brokers, desc.topic, config, at, marks, retry)
        starts.update(enumerate(desc.start_offsets))
    except KafkaReadError as e:
        raise SourceFailed(item.name, str(e)) from None
    except SourceUnavailable as e:
        raise SourceFailed(item.name, e.reason) from None
    ranges = []
    for partition, (_, high) in marks.items():
        start = starts.get(partition, 0)
        ranges.append((partition, start, max(start, high)))
    return SourceRead(
        tuple(ranges),
        tuple((partition, low) for partition, (low, _) in marks.items()),
        tuple((partition, high) for partition, (_, high) in marks.items()),
    )
