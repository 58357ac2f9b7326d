"""A Kafka source as a pair of DataFrames: oks (the source's rows) and errs (its errors).

One read of the topic feeds both: the reader decodes JSON, CSV and Avro in its Python
pass, TEXT is decoded natively, and every message ends up in exactly one of oks, errs, or
the documented skip (ENVELOPE NONE: a message with neither key nor value).

errs rows are `(kind, code, message, partition, offset, timestamp, key, value)`, `message`
being the full text a query over the source fails with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice.catalog.items import FormatDesc, Item, SourceDesc
from sluice.catalog.store import Catalog
from sluice.errors import FeatureNotSupported
from sluice.kafka.reader import NAME

ERRS_COLUMNS = ("kind", "code", "message", "partition", "offset", "timestamp", "key", "value")
FLAT_VALUE_MISSING = "Envelope error: Flat: Value not present for message"


@dataclass
class Collection:
    oks: DataFrame
    errs: DataFrame
    # The decoded read both derive from: cache it when both are used, so the topic is
    # read once.
    base: DataFrame | None = None


@dataclass(frozen=True)
class SourceRead:
    """What a snapshot reads: per partition `[start, end)`, and ranges lost to retention."""

    ranges: tuple[tuple[int, int, int], ...]
    lost: tuple[tuple[int, int, int], ...] = ()


def decode_spec(fmt: FormatDesc, registry_url: str | None) -> dict | None:
    """The reader's decoder spec for a format it decodes (None for TEXT and BYTES)."""
    if fmt.kind == "json":
        return {"kind": "json"}
    if fmt.kind == "csv":
        return {"kind": "csv", "columns": fmt.csv_column_count, "delimiter": fmt.csv_delimiter}
    if fmt.kind == "avro":
        return {
            "kind": "avro",
            "schema": fmt.avro_schema,
            "wire": fmt.confluent_wire_format,
            "registry": registry_url,
        }
    return None


def render_source(
    spark: SparkSession, item: Item, catalog: Catalog, read: SourceRead, config: dict
) -> Collection:
    desc: SourceDesc = item.details
    if desc.envelope != "none":
        raise FeatureNotSupported(
            f"reading ENVELOPE {desc.envelope.upper()} sources is not implemented yet",
            hint="ENVELOPE NONE sources can be queried today",
        )
    connection = catalog.by_id(desc.connection).details
    sides = {"value": desc.value_format}
    if desc.key_format is not None and desc.key_columns:
        sides["key"] = desc.key_format
    decode = {}
    for side, fmt in sides.items():
        registry = None
        if fmt.registry_connection is not None:
            registry = catalog.by_id(fmt.registry_connection).details.url
        spec = decode_spec(fmt, registry)
        if spec is not None:
            decode[side] = spec
    raw = (
        spark.read.format(NAME)
        .option("bootstrap", ",".join(connection.brokers))
        .option("topic", desc.topic)
        .option("config", json.dumps(config))
        .option("ranges", json.dumps([list(r) for r in read.ranges]))
        .option("decode", json.dumps(decode))
        .load()
    )
    include_key = "key" in sides
    key_error = _error(raw, "key", desc.key_format) if include_key else F.lit(None)
    value_error = _error(raw, "value", desc.value_format)
    error = (
        F.when(F.col("value").isNull() & F.col("key").isNotNull(), F.lit(FLAT_VALUE_MISSING))
        .when(key_error.isNotNull(), F.concat(F.lit("Decode error: "), key_error))
        .when(value_error.isNotNull(), F.concat(F.lit("Decode error: "), value_error))
    )
    code = (
        F.when(F.col("value").isNull(), F.lit("envelope-flat"))
        .when(key_error.isNotNull(), F.lit("decode-key"))
        .otherwise(F.lit("decode-value"))
    )
    kept = raw.where(F.col("key").isNotNull() | F.col("value").isNotNull()).withColumn(
        "__error", error
    )
    columns = []
    if include_key:
        keys = _side_columns(raw, "key", desc.key_format)
        columns += [F.struct(*keys)] if desc.key_packed else keys
    columns += _side_columns(raw, "value", desc.value_format)
    columns += [F.col(_METADATA[kind]) for kind, _ in desc.metadata]
    oks = kept.where(F.col("__error").isNull()).select(
        *(c.alias(column.name) for c, column in zip(columns, item.columns, strict=True))
    )
    errs = kept.where(F.col("__error").isNotNull()).select(
        F.when(F.col("value").isNull(), F.lit("envelope")).otherwise(F.lit("decode")).alias("kind"),
        code.alias("code"),
        F.col("__error").alias("message"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
    )
    if read.lost:
        errs = errs.unionByName(_lost_ranges(spark, desc.topic, read.lost))
    return Collection(oks, errs, kept)


_METADATA = {"PARTITION": "partition", "OFFSET": "offset", "TIMESTAMP": "timestamp", "HEADERS": "headers"}


def _error(raw: DataFrame, side: str, fmt: FormatDesc) -> SparkColumn:
    if fmt.kind == "text":
        text = F.col(side).cast("string")
        return F.when(
            F.col(side).isNotNull() & ~F.is_valid_utf8(text),
            F.concat(
                F.lit('Failed to decode UTF-8 (original bytes: "'),
                F.lower(F.hex(F.col(side))),
                F.lit('")'),
            ),
        )
    if fmt.kind == "bytes":
        return F.lit(None).cast("string")
    return F.col(f"{side}_error")


def _side_columns(raw: DataFrame, side: str, fmt: FormatDesc) -> list[SparkColumn]:
    if fmt.kind == "text":
        return [F.col(side).cast("string")]
    if fmt.kind == "bytes":
        return [F.col(side)]
    data = F.col(f"{side}_data")
    if fmt.kind == "json":
        return [F.parse_json(data)]
    if fmt.kind == "csv":
        return [data[i] for i in range(fmt.csv_column_count)]
    if not fmt.named:
        return [data]
    fields = raw.schema[f"{side}_data"].dataType.fieldNames()
    columns = []
    for name in fields:
        field_type = raw.schema[f"{side}_data"].dataType[name].dataType
        branches = getattr(field_type, "fieldNames", lambda: [])()
        if branches and all(b.startswith("branch") for b in branches):
            columns += [data[name][b] for b in branches]
        else:
            columns.append(data[name])
    return columns


def _lost_ranges(spark: SparkSession, topic: str, lost) -> DataFrame:
    rows = [
        (
            "source",
            "offsets-lost",
            f"Source error: topic '{topic}' partition {p}: offsets {start} to {end - 1} were "
            "deleted by retention before they were read",
            p,
            start,
            None,
            None,
            None,
        )
        for p, start, end in lost
    ]
    return spark.createDataFrame(
        rows,
        "kind string, code string, message string, partition int, offset bigint, "
        "timestamp timestamp, key binary, value binary",
    )


def first_error(errs: DataFrame) -> str | None:
    """The error a query over the collection fails with: the smallest by (kind, partition,
    offset), so the same data always gives the same error."""
    row = errs.orderBy("kind", "partition", "offset").select("message").first()
    return None if row is None else row.message
