"""Avro schemas ↔ SQL columns: the columns a schema decodes to (DESIGN §3), and the
schema a row of columns encodes with.

Decoding: a top-level record is flattened into one column per field; `["null", T]` is a
nullable T; a union of several non-null types at the top level becomes one nullable
column per branch (`f1`, `f2`, …); nested records are record columns (a record of no
fields too); `null` alone (a field, list items, map values, a union of nothing else) is a
text always NULL. Schema text is
validated with fastavro and its complaints become `InvalidSchema` errors.

Encoding: `schema_of` gives a record with one field per column, a nullable column as
`["null", T]`; types Avro has no better form for (numeric, whose scale a column does not
fix, jsonb, interval, …) are strings in PostgreSQL's text, as the Avro encoders of
`formats.py` write them.
"""

from __future__ import annotations

import json

from fastavro.schema import SchemaParseException

from sluice.catalog.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INTEGER,
    JSONB,
    NUMERIC,
    REAL,
    TEXT,
    TIME,
    TIMESTAMP,
    UNNAMED_COLUMN,
    UUID,
    Column,
    SqlType,
    list_of,
    record,
    unique_columns,
)
from sluice.errors import FeatureNotSupported, InternalError, InvalidSchema, Span
from sluice.kafka.decode import DEBEZIUM_JSON, parse_schema


def parse_avro_schema(text: str, span: Span | None) -> object:
    try:
        schema = json.loads(text)
        parse_schema(schema)
    except (ValueError, SchemaParseException, TypeError, KeyError, AttributeError) as e:
        raise InvalidSchema(f"invalid Avro schema: {e}", span=span) from None
    return schema


def avro_columns(text: str, span: Span | None) -> tuple[tuple[Column, ...], bool]:
    """The columns of an Avro schema, and whether they are named by a record's fields."""
    schema = parse_avro_schema(text, span)
    mapper = _TypeMapper(span)
    top = mapper.resolve(schema)
    return mapper.columns(schema), isinstance(top, dict) and top.get("type") == "record"


def debezium_columns(text: str, span: Span | None) -> tuple[Column, ...]:
    """The columns of a Debezium envelope: the fields of its `after` record, checked as
    Materialize checks the value's columns (an `after`; a `before`, if any, of its type)."""
    schema = parse_avro_schema(text, span)
    envelope = {c.name: c for c in _TypeMapper(span, json_in=("before", "after")).columns(schema)}
    after = envelope.get("after")
    if after is None:
        raise InvalidSchema("'after' column missing from debezium input", span=span)
    before = envelope.get("before")
    if before is not None:
        if before.type.name != "record":
            raise InvalidSchema("'before' column must be of type record", span=span)
        if (before.type, before.nullable) != (after.type, after.nullable):
            raise InvalidSchema("'before' type differs from 'after' column", span=span)
    if after.type.name != "record":
        kind = _MATERIALIZE_SCALAR_NAMES.get(after.type.name, after.type.display())
        raise InvalidSchema(
            f"Incorrect type for Debezium value, expected Record, got {kind}", span=span
        )
    return tuple(c.as_nullable() for c in after.type.fields)


# Materialize's names of its scalar types (as its Debezium type error prints them).
_MATERIALIZE_SCALAR_NAMES = {
    "boolean": "Bool",
    "integer": "Int32",
    "bigint": "Int64",
    "real": "Float32",
    "double precision": "Float64",
    "bytea": "Bytes",
    "text": "String",
    "jsonb": "Jsonb",
    "date": "Date",
    "uuid": "Uuid",
    "list": "List",
    "map": "Map",
}

_PRIMITIVE_TYPES = {
    "boolean": BOOLEAN,
    "int": INTEGER,
    "long": BIGINT,
    "float": REAL,
    "double": DOUBLE,
    "bytes": BYTEA,
    "string": TEXT,
}
_LOGICAL_TYPES = {
    "date": DATE,
    "time-millis": TIME,
    "time-micros": TIME,
    "timestamp-millis": TIMESTAMP,
    "timestamp-micros": TIMESTAMP,
    "local-timestamp-millis": TIMESTAMP,
    "local-timestamp-micros": TIMESTAMP,
    "decimal": NUMERIC,
    "uuid": UUID,
}


class _TypeMapper:
    """Avro schema JSON → SQL types, resolving named types in their namespaces."""

    def __init__(self, span: Span | None, json_in: tuple[str, ...] = ()) -> None:
        """Debezium JSON strings are jsonb where they become the source's own columns: in
        the top-level record, and in its records named by `json_in` (a Debezium envelope's
        `before` and `after`); deeper, they stay text."""
        self.span = span
        self.named: dict[str, dict] = {}
        self.expanding: set[str] = set()
        self.json_in = json_in

    def columns(self, schema: object) -> tuple[Column, ...]:
        top = self.resolve(schema)
        if not (isinstance(top, dict) and top.get("type") == "record"):
            # Materialize names the one column of a non-record schema as an unnamed output.
            sql_type, nullable = self.field_type(schema, "value")
            return (Column(UNNAMED_COLUMN, sql_type, nullable),)
        out: list[Column] = []
        for f in top.get("fields", []):
            branches = self._non_null_branches(f["type"])
            if len(branches) > 1:
                for i, branch in enumerate(branches, start=1):
                    sql_type, _ = self.field_type(branch, f["name"])
                    out.append(Column(f"{f['name']}{i}", sql_type, True))
            else:
                sql_type, nullable = self.field_type(f["type"], f["name"], json=True)
                out.append(Column(f["name"], sql_type, nullable))
        return unique_columns([(c, self.span) for c in out])

    def _non_null_branches(self, avro_type: object) -> list:
        if isinstance(avro_type, list):
            return [b for b in avro_type if b != "null"]
        return [avro_type]

    def resolve(self, avro_type: object, namespace: str = "") -> object:
        """Named references replaced by their definitions (recording new definitions)."""
        if isinstance(avro_type, str):
            if avro_type in _PRIMITIVE_TYPES or avro_type == "null":
                return avro_type
            full = avro_type if "." in avro_type or not namespace else f"{namespace}.{avro_type}"
            return self.named.get(full) or self.named.get(avro_type) or avro_type
        if isinstance(avro_type, dict) and avro_type.get("type") in ("record", "enum", "fixed"):
            name = avro_type["name"]
            ns = avro_type.get("namespace", namespace)
            full = name if "." in name or not ns else f"{ns}.{name}"
            self.named[full] = avro_type
            self.named.setdefault(name, avro_type)
        return avro_type

    def field_type(
        self, avro_type: object, field: str, namespace: str = "", json: bool = False
    ) -> tuple[SqlType, bool]:
        """The SQL type of an Avro type and whether it is nullable (`json`: whether a
        Debezium JSON string here is jsonb)."""
        if isinstance(avro_type, list):
            branches = self._non_null_branches(avro_type)
            if not branches:
                return self.field_type("null", field, namespace, json)
            if len(branches) != 1:
                raise FeatureNotSupported(
                    f'Avro union in "{field}" with more than one non-null type is only '
                    "supported for top-level fields",
                    span=self.span,
                )
            sql_type, _ = self.field_type(branches[0], field, namespace, json)
            return sql_type, "null" in avro_type
        resolved = self.resolve(avro_type, namespace)
        if resolved == "null":
            # Always NULL: text, as PostgreSQL resolves an unknown (`ARRAY[NULL]` is text[]).
            return TEXT, True
        if isinstance(resolved, str):
            if resolved in _PRIMITIVE_TYPES:
                return _PRIMITIVE_TYPES[resolved], False
            raise InvalidSchema(f'unknown Avro type "{resolved}" in "{field}"', span=self.span)
        if not isinstance(resolved, dict):  # a schema fastavro parsed: a union was handled above
            raise InternalError.bug(f'Avro type {resolved!r} of "{field}" is no name, union or object')
        logical = _LOGICAL_TYPES.get(resolved.get("logicalType", ""))
        precision = resolved.get("precision")
        if logical is NUMERIC and not (isinstance(precision, int) and precision > 0):
            # fastavro checks a decimal's scale but not its precision; no column holds none.
            raise InvalidSchema(
                f"invalid Avro schema: decimal precision must be a positive integer, not {precision}", span=self.span
            )
        if logical is not None:
            return logical, False
        kind = resolved.get("type")
        if kind == "string" and resolved.get("connect.name") == DEBEZIUM_JSON:
            return (JSONB if json else TEXT), False
        if kind == "record":
            return self._record(resolved, namespace, json and field in self.json_in), False
        if kind == "enum":
            return TEXT, False
        if kind == "fixed":
            return BYTEA, False
        if kind == "array":
            element, _ = self.field_type(resolved["items"], field, namespace)
            return list_of(element), False
        if kind == "map":
            value, _ = self.field_type(resolved["values"], field, namespace)
            return SqlType("map", element=value), False
        return self.field_type(kind, field, namespace)

    def _record(self, schema: dict, namespace: str, json: bool = False) -> SqlType:
        name = schema["name"]
        if name in self.expanding:
            raise FeatureNotSupported(f'recursive Avro type "{name}" is not supported', span=self.span)
        self.expanding.add(name)
        ns = schema.get("namespace", namespace)
        fields = []
        for f in schema.get("fields", []):
            sql_type, nullable = self.field_type(f["type"], f["name"], ns, json)
            fields.append(Column(f["name"], sql_type, nullable))
        self.expanding.discard(name)
        return record(*fields)


# The Avro types of the SQL types Avro has a form for; every other scalar type is a string
# holding its PostgreSQL text.
AVRO_TYPE_OF: dict[str, object] = {
    "boolean": "boolean",
    "integer": "int",
    "bigint": "long",
    "real": "float",
    "double precision": "double",
    "bytea": "bytes",
    "text": "string",
    "date": {"type": "int", "logicalType": "date"},
    "time": {"type": "long", "logicalType": "time-micros"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "uuid": {"type": "string", "logicalType": "uuid"},
}


def schema_of(columns: tuple[Column, ...], name: str = "row") -> dict:
    """The Avro record schema a row of `columns` encodes with, which `avro_columns` reads
    back as the same columns (types without an Avro form as text). List items and map
    values may be NULL in SQL, so they are nullable."""
    record_names = iter(range(1, 1 << 31))  # a schema's record names must differ

    def avro_type(sql_type: SqlType) -> object:
        if sql_type.name == "record":
            return {"type": "record", "name": f"record{next(record_names)}", "fields": fields(sql_type.fields)}
        element = sql_type.element
        if sql_type.name == "list" and element is not None:
            return {"type": "array", "items": ["null", avro_type(element)]}
        if sql_type.name == "map" and element is not None:
            return {"type": "map", "values": ["null", avro_type(element)]}
        return AVRO_TYPE_OF.get(sql_type.name, "string")

    def fields(columns: tuple[Column, ...]) -> list[dict]:
        return [
            {"name": c.name, "type": ["null", avro_type(c.type)] if c.nullable else avro_type(c.type)}
            for c in columns
        ]

    return {"type": "record", "name": name, "fields": fields(columns)}
