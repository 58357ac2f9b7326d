"""The Arrow columns an Avro schema's datums fill, and the values inside a datum that its
column cannot hold.

`ArrowShape` gives a schema's Arrow types — as fastavro reads its datums with some logical
types left plain (`plain_schema`), and as the column holds them — and the leaves to check:
an `int` beyond 32 bits, a decimal beyond its precision, a date, timestamp, time or UUID
out of range or malformed, a Debezium JSON string jsonb cannot hold. Each becomes its own
message's decode error, with Materialize's text, instead of failing the batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.kafka.avro_schema import DEBEZIUM_JSON
from sluice.kafka.json_decode import debezium_json_problem

# Avro logical types whose plain values fastavro hands over and Arrow converts itself,
# vectorised and range-checked here: (Arrow type built from the plain value, the column's
# type). fastavro's own conversions make a Python object per value and raise on what Python
# cannot hold with texts naming no value. Spark's TIME is nanoseconds in Arrow.
_PLAIN_LOGICAL = {
    "date": (pa.date32(), pa.date32()),
    "timestamp-millis": (pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")),
    "timestamp-micros": (pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="UTC")),
    "local-timestamp-millis": (pa.timestamp("ms"), pa.timestamp("us")),
    "local-timestamp-micros": (pa.timestamp("us"), pa.timestamp("us")),
    "time-millis": (pa.time32("ms"), pa.time64("ns")),
    "time-micros": (pa.time64("us"), pa.time64("ns")),
    "uuid": (pa.string(), pa.string()),
}
_AVRO_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
# Spark's decimals hold at most 38 digits.
_MAX_DECIMAL_PRECISION = 38
# What Python (so every query handing rows back) holds: years 1 to 9999.
_DAYS = (-719_162, 2_932_896)
_SECONDS = (-62_135_596_800, 253_402_300_799)
_DAY_SECONDS = 86_400
_HYPHENATED_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


@dataclass(frozen=True)
class _Leaf:
    """Values inside a datum that a column cannot hold although Arrow builds them, or
    refuses them with a text that names no value.

    `path` leads to them: record fields by name, None into a list's items or a map's
    values. `problem` is the text for one plain value (None when it is fine); `fits`
    checks a whole Arrow column of them at once, None where building the column checks
    them already."""

    path: tuple[str | None, ...]
    problem: Callable[[Any], str | None]
    fits: Callable[[pa.Array], bool] | None = None

    def values(self, datum: Any) -> list[Any]:
        values = [datum]
        for step in self.path:
            inner: list[Any] = []
            for value in values:
                if step is None and isinstance(value, (list, dict)):
                    inner.extend(value.values() if isinstance(value, dict) else value)
                elif step is not None and isinstance(value, dict):
                    inner.append(value.get(step))
            values = [v for v in inner if v is not None]
        return values

    def column(self, array: pa.Array) -> pa.Array:
        for step in self.path:
            if step is not None:
                array = array.field(step)
            elif isinstance(array, pa.MapArray):
                array = array.items
            else:
                array = array.flatten()
        return array


def _in_range(low: int, high: int, text: Callable[[int], str]) -> tuple[Callable, Callable]:
    """(problem, fits) for plain integers that must lie in [low, high]."""

    def problem(value: Any) -> str | None:
        return text(value) if isinstance(value, int) and not low <= value <= high else None

    def fits(column: pa.Array) -> bool:
        bounds = pc.min_max(column.view(pa.int32() if column.type.bit_width == 32 else pa.int64()))
        return bounds["min"].as_py() is None or (low <= bounds["min"].as_py() and bounds["max"].as_py() <= high)

    return problem, fits


def _timestamp_text(unit: str, per_second: int) -> Callable[[int], str]:
    def text(value: int) -> str:
        seconds, fraction = divmod(abs(value), per_second)
        return f"Invalid {unit} timestamp {'-' if value < 0 else ''}{seconds}.{fraction}"

    return text


def _logical_leaf(logical: str, path: tuple) -> _Leaf:
    if logical == "uuid":

        def problem(value: Any) -> str | None:
            if isinstance(value, str) and re.match(_HYPHENATED_UUID, value) is None:
                return "UUID decoding failed: badly formed hexadecimal UUID string"
            return None

        def fits(column: pa.Array) -> bool:
            return pc.all(pc.match_substring_regex(column, _HYPHENATED_UUID)).as_py() is not False

        return _Leaf(path, problem, fits)
    if logical == "date":
        return _Leaf(path, *_in_range(*_DAYS, lambda days: f"Date out of range: {days}"))
    per_second = 1000 if logical.endswith("millis") else 1_000_000
    unit = "ms" if per_second == 1000 else "us"
    if logical in ("time-millis", "time-micros"):
        return _Leaf(path, *_in_range(0, _DAY_SECONDS * per_second - 1, lambda v: f"Invalid {unit} time {v}"))
    low, high = _SECONDS
    return _Leaf(path, *_in_range(low * per_second, (high + 1) * per_second - 1, _timestamp_text(unit, per_second)))


def _int32_problem(value: Any) -> str | None:
    if isinstance(value, int) and not -(2**31) <= value < 2**31:
        return f"Expected i32, got: {value}"
    return None


def _decimal_leaf(precision: int, scale: int, path: tuple) -> _Leaf:
    def problem(value: Any) -> str | None:
        # `adjusted()`: the power of ten of the leading digit.
        if isinstance(value, Decimal) and value.is_finite() and value and value.adjusted() >= precision - scale:
            return f"Error decoding numeric: exceeds maximum precision {precision}"
        return None

    return _Leaf(path, problem)


def _debezium_json_fits(column: pa.Array) -> bool:
    return all(debezium_json_problem(v) is None for v in column.to_pylist())


# An Avro record of no fields (a record with none in SQL) as Arrow holds it: Parquet cannot
# write a struct of no fields, so a continuously ingested source could not commit one. Its
# one field is always NULL, so its text is `()` as an empty record's is in PostgreSQL.
EMPTY_RECORD = pa.struct([("_empty", pa.bool_())])


@dataclass
class ArrowShape:
    """The Arrow types of an Avro schema's datums — as fastavro reads them with the logical
    types of `_PLAIN_LOGICAL` left plain (`plain`), and as the column holds them — and the
    leaves to check. Unions of one non-null type are that type; of several, a struct of
    `branch1`, `branch2`, …; `null` (alone, in a union of nothing else, as list items or
    map values) is a text always NULL; a record of no fields is EMPTY_RECORD."""

    named: dict[str, Any] = field(default_factory=dict)
    leaves: list[_Leaf] = field(default_factory=list)

    def of(self, schema: Any, path: tuple = ()) -> tuple[pa.DataType, pa.DataType]:
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if len(branches) <= 1:
                return self.of(branches[0] if branches else "null", path)
            return self._struct([(f"branch{i}", b) for i, b in enumerate(branches, 1)], path)
        if isinstance(schema, str):
            if schema == "null":
                # Always NULL: text, as PostgreSQL resolves an unknown (`ARRAY[NULL]` is text[]).
                return pa.null(), pa.string()
            if schema in _AVRO_PRIMITIVES:
                if schema == "int":
                    self.leaves.append(_Leaf(path, _int32_problem))
                return _AVRO_PRIMITIVES[schema], _AVRO_PRIMITIVES[schema]
            return self.of(self.named[schema.rsplit(".", 1)[-1]], path)
        logical = schema.get("logicalType")
        if logical in _PLAIN_LOGICAL:
            self.leaves.append(_logical_leaf(logical, path))
            return _PLAIN_LOGICAL[logical]
        if logical == "decimal":
            precision = min(schema.get("precision", _MAX_DECIMAL_PRECISION), _MAX_DECIMAL_PRECISION)
            scale = min(schema.get("scale", 0), precision)
            self.leaves.append(_decimal_leaf(precision, scale, path))
            decimal = pa.decimal128(precision, scale)
            return decimal, decimal
        kind = schema.get("type")
        if kind == "string" and schema.get("connect.name") == DEBEZIUM_JSON:
            self.leaves.append(_Leaf(path, debezium_json_problem, _debezium_json_fits))
            return pa.string(), pa.string()
        if kind in ("record", "enum", "fixed"):
            self.named[schema["name"].rsplit(".", 1)[-1]] = schema
        if kind == "record":
            return self._struct([(f["name"], f["type"]) for f in schema["fields"]], path)
        if kind == "enum":
            return pa.string(), pa.string()
        if kind == "fixed":
            return pa.binary(), pa.binary()
        if kind == "array":
            plain, column = self.of(schema["items"], path + (None,))
            return pa.list_(plain), pa.list_(column)
        if kind == "map":
            plain, column = self.of(schema["values"], path + (None,))
            return pa.map_(pa.string(), plain), pa.map_(pa.string(), column)
        return self.of(kind, path)

    def _struct(self, fields: list[tuple[str, Any]], path: tuple) -> tuple[pa.DataType, pa.DataType]:
        if not fields:
            return EMPTY_RECORD, EMPTY_RECORD
        types = [(name, *self.of(avro_type, path + (name,))) for name, avro_type in fields]
        return pa.struct([(n, plain) for n, plain, _ in types]), pa.struct([(n, column) for n, _, column in types])


def plain_schema(schema: Any) -> Any:
    """`schema` (parsed or not) without the logical types of `_PLAIN_LOGICAL` and fastavro's
    own markers: fastavro reads their plain values."""
    if isinstance(schema, list):
        return [plain_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        k: plain_schema(v)
        for k, v in schema.items()
        if not k.startswith("__") and not (k == "logicalType" and v in _PLAIN_LOGICAL)
    }
