"""Avro schemas as sluice reads them with fastavro: the field defaults Materialize takes
(`parse_schema`), the Debezium marker of a JSON string, and whether a writer schema's
datums could cost more than their bytes (`unbounded`).
"""

from __future__ import annotations

from typing import Any

import fastavro

# Avro strings Debezium marks as JSON documents (Kafka Connect's `connect.name`): jsonb
# columns, as Materialize reads them.
DEBEZIUM_JSON = "io.debezium.data.Json"


def parse_schema(schema: Any, named_schemas: dict | None = None) -> Any:
    """An Avro schema as fastavro reads it, taking the field defaults Materialize takes:
    fastavro refuses a primitive default of another JSON type (`1.0` for an int, `null`
    for a string), which Materialize reads only when a writer schema lacks the field.
    Such a default is dropped: reading a writer without the field is then that message's
    decode error, never a value of another type (or a NULL) in the column."""
    return fastavro.parse_schema(_usable_defaults(schema), named_schemas)


_DEFAULT_TYPES: dict[str, type | tuple[type, ...]] = {
    "null": type(None),
    "boolean": bool,
    "int": int,
    "long": int,
    "float": (int, float),
    "double": (int, float),
    "string": str,
    "bytes": str,
}


def _usable_defaults(schema: Any) -> Any:
    """`schema` without the field defaults that do not match their primitive type."""
    if isinstance(schema, list):
        return [_usable_defaults(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _usable_defaults(v) for k, v in schema.items()}
    if "default" in out and "type" in out and "name" in out and schema.get("type") != "record":
        branches = out["type"] if isinstance(out["type"], list) else [out["type"]]
        kinds = [k for b in branches if isinstance(b, str) and (k := _DEFAULT_TYPES.get(b)) is not None]
        if len(kinds) == len(branches) and not any(isinstance(out["default"], k) for k in kinds):
            del out["default"]
    return out


def unbounded(schema: Any) -> str | None:
    """Why datums of a parsed schema could cost more than their bytes, or None: a recursive
    type nests as deep as its bytes allow (fastavro's compiled reader recurses on the C
    stack, and thousands of levels overflow it). (Arrays of items that take no bytes are
    bounded per datum by avro_check instead.)"""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    expanding: set[str] = set()
    done: set[str] = set()

    def walk(avro_type: Any) -> str | None:
        if isinstance(avro_type, list):
            return next(filter(None, map(walk, avro_type)), None)
        if isinstance(avro_type, str):
            if avro_type in expanding:
                return f'a recursive type "{avro_type}"'
            if avro_type not in named or avro_type in done:
                return None
            avro_type = named[avro_type]
        if not isinstance(avro_type, dict):
            return None
        name = avro_type.get("name")
        kind = avro_type["type"]
        if name is not None:
            expanding.add(name)
        if kind == "record":
            problem = next(filter(None, (walk(f["type"]) for f in avro_type["fields"])), None)
        elif kind in ("array", "map"):
            problem = walk(avro_type.get("items", avro_type.get("values")))
        else:
            problem = walk(kind) if isinstance(kind, (dict, list)) else None
        if name is not None:
            expanding.discard(name)
            done.add(name)
        return problem

    return walk(schema)
