"""Decoding message keys and values inside the reader's Python pass, into Arrow columns.

JSON, CSV and Avro decode here, in the pass that already touches every message (one
JVM↔Python hop instead of two). Spark's own `parse_json` accepts trailing garbage (`1 2`
reads as `1`) and its CSV reader turns empty fields into NULL, so neither is faithful
enough for a decoder that must report every bad message. TEXT and BYTES stay Spark-native.

Each decoder turns a list of payloads into (data column, error column): for a payload that
decodes, the data and a NULL error; for one that does not, NULL data and the error text
`<kind> (original text: …, original bytes: "…")`, exactly as DESIGN §4 words it after
`Decode error: `. NULL payloads (tombstones, missing keys) give NULL and no error.
"""

from __future__ import annotations

import csv
import io
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pyarrow as pa

from sluice.kafka.retry import RetryPolicy


def describe_bytes(payload: bytes) -> str:
    """`(original text: …, original bytes: "…")`, the text omitted when it is not UTF-8."""
    hex_text = payload.hex()
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return f'(original bytes: "{hex_text}")'
    return f'(original text: {text}, original bytes: "{hex_text}")'


class DecodeFailure(Exception):
    """One payload's failure; its text is the error kind and detail."""


def decode_each(payloads: Sequence[bytes | None], decode_one) -> tuple[list, list]:
    """(data, errors) for `payloads`: `decode_one(payload, index)` gives a datum or raises
    DecodeFailure, whose text gets the payload's description appended."""
    data, errors = [], []
    for index, payload in enumerate(payloads):
        if payload is None:
            data.append(None)
            errors.append(None)
            continue
        try:
            data.append(decode_one(payload, index))
            errors.append(None)
        except DecodeFailure as e:
            data.append(None)
            errors.append(f"{e} {describe_bytes(payload)}")
    return data, errors


def _reject_constant(name: str) -> None:
    raise ValueError(f"invalid JSON constant {name}")


class JsonDecoder:
    """Valid JSON text, kept as written for Spark's `parse_json` to turn into a variant."""

    arrow_type = pa.string()

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, self._one)

    @staticmethod
    def _one(payload: bytes, _index: int) -> str:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeFailure(f"Failed to decode JSON: invalid UTF-8 at byte {e.start}") from None
        try:
            json.loads(text, parse_constant=_reject_constant)
        except ValueError as e:
            raise DecodeFailure(f"Failed to decode JSON: {e}") from None
        return text


@dataclass
class CsvDecoder:
    """One record per message; the record number in errors is the offset + 1."""

    columns: int
    delimiter: str = ","

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.list_(pa.string())

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, lambda payload, i: self._one(payload, offsets[i] + 1))

    def _one(self, payload: bytes, record: int) -> list[str]:
        try:
            text = payload.decode("utf-8")
            rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter))
        except (UnicodeDecodeError, csv.Error) as e:
            raise DecodeFailure(f"CSV error at record number {record}: {e}") from None
        fields = rows[0] if rows else []
        if len(rows) > 1 or len(fields) != self.columns:
            got = sum(len(r) for r in rows)
            raise DecodeFailure(
                f"CSV error at record number {record}: expected {self.columns} columns, got {got}."
            )
        return fields


@dataclass
class AvroDecoder:
    """Avro datums, with or without the Confluent header (magic 0 + 4-byte schema id).

    With a registry, the writer schema is fetched by id (with the registry's login, when it
    needs one) and cached for the decoder's life (one per reader task); without, the reader
    schema is also the writer schema.
    """

    schema_json: str
    confluent_wire_format: bool = True
    registry_url: str | None = None
    registry_login: tuple[str, str | None] | None = field(default=None, repr=False)
    retry: RetryPolicy = RetryPolicy(0, 0)  # how registry look-ups wait out faults

    def __post_init__(self) -> None:
        named: dict[str, Any] = {}
        self.reader_schema = fastavro.parse_schema(json.loads(self.schema_json), named_schemas=named)
        self.writers: dict[int, Any] = {}
        self.arrow_type = avro_arrow_type(json.loads(self.schema_json))
        self.unions = _top_level_unions(self.reader_schema, named)

    def writer(self, schema_id: int):
        if self.registry_url is None:
            return self.reader_schema
        if schema_id not in self.writers:
            from sluice.kafka.registry import SchemaRegistry

            # A failed look-up is remembered too: one slow registry answer per id, not one
            # per message. A fault of the registry itself fails the read instead.
            try:
                registry = SchemaRegistry(self.registry_url, *(self.registry_login or ()))
                text = registry.writer_schema(schema_id, self.retry)
                self.writers[schema_id] = fastavro.parse_schema(json.loads(text))
            except Exception as e:  # noqa: BLE001 - becomes each affected datum's error
                self.writers[schema_id] = e
        writer = self.writers[schema_id]
        if isinstance(writer, Exception):
            raise writer
        return writer

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, self._one)

    def _one(self, payload: bytes, _index: int):
        try:
            return self._datum(payload)
        except Exception as e:  # noqa: BLE001 - any failure of a datum is that datum's error
            raise DecodeFailure(f"avro deserialization error: {_avro_reason(e)}") from None

    def _datum(self, payload: bytes):
        body = io.BytesIO(payload)
        writer = self.reader_schema
        if self.confluent_wire_format:
            if len(payload) < 5:
                raise _AvroFraming(f"message is {len(payload)} bytes, too short for the Confluent header")
            if payload[0] != 0:
                raise _AvroFraming(
                    f"wrong Confluent-style avro serialization magic: expected 0, got {payload[0]}"
                )
            writer = self.writer(struct.unpack(">I", payload[1:5])[0])
            body.seek(5)
        datum = fastavro.schemaless_reader(body, writer, self.reader_schema)
        if body.tell() != len(payload):
            raise _AvroFraming(f"{len(payload) - body.tell()} bytes left over after the datum")
        for name, branches in self.unions:
            datum[name] = _as_branches(datum[name], branches)
        return datum


def _top_level_unions(schema: Any, named: dict[str, Any]) -> list[tuple[str, list]]:
    """The fields of a top-level record whose type is a union of several non-null types
    (their Arrow type is a struct of `branch1`, `branch2`, …), with those branches."""
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        return []
    unions = []
    for f in schema["fields"]:
        if isinstance(f["type"], list):
            branches = [named.get(b, b) if isinstance(b, str) else b for b in f["type"] if b != "null"]
            if len(branches) > 1:
                unions.append((f["name"], branches))
    return unions


def _as_branches(value: Any, branches: list) -> dict | None:
    """A union's value as `{"branchN": value}`, N the first branch the value is a datum of
    (fastavro returns the value alone; an int fitting both `int` and `long` goes to the
    first of them)."""
    if value is None:
        return None
    from fastavro.validation import validate

    for i, branch in enumerate(branches, 1):
        if validate(value, branch, raise_errors=False):
            return {f"branch{i}": value}
    raise _AvroFraming(f"value {value!r} matches no branch of its union")


class _AvroFraming(ValueError):
    pass


def _avro_reason(error: Exception) -> str:
    if isinstance(error, _AvroFraming):
        return str(error)
    if isinstance(error, (EOFError, struct.error)):
        return "unexpected end of datum"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


_AVRO_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def avro_arrow_type(schema: Any, named: dict | None = None) -> pa.DataType:
    """The Arrow type of an Avro schema's datums (unions of one non-null type: that type)."""
    named = {} if named is None else named
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return avro_arrow_type(branches[0], named)
        return pa.struct(
            [(f"branch{i}", avro_arrow_type(b, named)) for i, b in enumerate(branches, 1)]
        )
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        return avro_arrow_type(named[schema.rsplit(".", 1)[-1]], named)
    logical = schema.get("logicalType")
    if logical == "date":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("us")
    if logical in ("time-millis", "time-micros"):
        return pa.time64("us")
    if logical == "decimal":
        return pa.decimal128(schema.get("precision", 38), schema.get("scale", 0))
    if logical == "uuid":
        return pa.string()
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed"):
        named[schema["name"].rsplit(".", 1)[-1]] = schema
    if kind == "record":
        return pa.struct([(f["name"], avro_arrow_type(f["type"], named)) for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(avro_arrow_type(schema["items"], named))
    if kind == "map":
        return pa.map_(pa.string(), avro_arrow_type(schema["values"], named))
    return avro_arrow_type(kind, named)
