"""A sink's rows encoded on Spark's executors: JSON assembled in the JVM where Spark writes
a value's bytes exactly as the format's encoder does, any other format (and any other
column) by an Arrow-batched Python UDF calling the format registry's encoder — one encoder
per format, whatever writes it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timezone
from typing import Any

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from sluice.catalog.formats import AvroRegistry, Format, Json
from sluice.errors import InternalError
from sluice.spark.pyspark_code import F


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
        values = tuple(_plain(v) for v in row)
        if not self.body:
            return self.fmt.encode(values)
        if not isinstance(self.fmt, AvroRegistry):  # a body is a Debezium row's, in a registry's Avro
            raise InternalError.bug(f"the unframed body of a row in {type(self.fmt).__name__}")
        return self.fmt.body(values)


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
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value
