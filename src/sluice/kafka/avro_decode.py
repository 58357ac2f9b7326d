"""The Avro decoder: datums, bare or in the Confluent wire format, read with fastavro
against the writer schema (from the schema registry by id, or the reader schema itself),
checked strictly first (kafka/avro_check.py), and set into the columns kafka/avro_columns.py
shapes, with mz-avro's texts for what is wrong.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pyarrow as pa

from sluice.kafka.avro_check import AvroFault, Incomplete, checker
from sluice.kafka.avro_columns import ArrowShape, plain_schema
from sluice.kafka.avro_schema import parse_schema, unbounded
from sluice.kafka.decode import DecodeFailure, Decoder, decode_each, describe_bytes
from sluice.kafka.retry import RetryPolicy


class _AvroFraming(ValueError):
    pass


@dataclass
class AvroDecoder(Decoder):
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
        schema = json.loads(self.schema_json)
        named: dict[str, Any] = {}
        self.reader_schema = parse_schema(plain_schema(schema), named)
        self.writers: dict[int, Any] = {}
        shape = ArrowShape()
        self.plain_type, self.arrow_type = shape.of(schema)
        self.leaves = shape.leaves
        self.unions = _top_level_unions(self.reader_schema, named)
        # Writer schema (by identity) → the schema fastavro reads it with and its checks, or
        # why it cannot be read. The reader schema reads itself: fastavro skips resolving a
        # schema against itself.
        self.readable: dict[int, Any] = {}

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
                self.writers[schema_id] = parse_schema(json.loads(text))
            except Exception as e:  # noqa: BLE001 - becomes each affected datum's error
                self.writers[schema_id] = e
        writer = self.writers[schema_id]
        if isinstance(writer, Exception):
            raise writer
        return writer

    @staticmethod
    def _bounded(schema: Any) -> Any:
        """`schema` (parsed, logical types plain) if its datums cost no more than their
        bytes, else why not."""
        try:
            problem = unbounded(schema)
        except RecursionError:
            problem = "nesting too deep to check"
        return schema if problem is None else _AvroFraming(f"writer schema with {problem} is not supported")

    def _readable(self, writer: Any) -> tuple[Any, Callable, Callable]:
        """The writer schema as fastavro reads it (logical types left plain), with the
        strict checks of its datums (avro_check: without, then with UTF-8), once per writer."""
        if id(writer) not in self.readable:
            try:
                readable = self._bounded(writer if writer is self.reader_schema else parse_schema(plain_schema(writer)))
                if not isinstance(readable, Exception):
                    readable = (readable, checker(readable), checker(readable, utf8=True))
            except RecursionError:
                readable = _AvroFraming("writer schema nests too deeply")
            self.readable[id(writer)] = readable
        readable = self.readable[id(writer)]
        if isinstance(readable, Exception):
            raise readable
        return readable

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, self._one)

    def columns(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[pa.Array, pa.Array]:
        data, errors = self.decode(payloads, offsets)
        try:
            plain = pa.array(data, self.plain_type)
            fits = all(leaf.fits(leaf.column(plain)) for leaf in self.leaves if leaf.fits is not None)
        except Exception:  # noqa: BLE001 - some datum does not fit: found row by row below
            fits = False
        if not fits:
            plain = self._fitting(data, errors, payloads)
        column = plain if self.plain_type == self.arrow_type else plain.cast(self.arrow_type)
        return column, pa.array(errors, pa.string())

    def _fitting(self, data: list, errors: list, payloads: Sequence[bytes | None]) -> pa.Array:
        """The plain column of `data` once every datum its column cannot hold is turned into
        its message's error (`data` and `errors` are updated in place)."""

        def unfit(index: int, payload: bytes, problem: str) -> None:
            data[index] = None
            errors[index] = f"avro deserialization error: {problem} {describe_bytes(payload)}"

        # A payload that is None has no datum (decode_each): a datum's payload is bytes.
        for index, (datum, payload) in enumerate(zip(data, payloads, strict=True)):
            if datum is not None and payload is not None:
                problem = next(
                    (p for leaf in self.leaves for p in map(leaf.problem, leaf.values(datum)) if p is not None), None
                )
                if problem is not None:
                    unfit(index, payload, problem)
        try:
            return pa.array(data, self.plain_type)
        except Exception:  # noqa: BLE001 - what the leaves do not name: each datum alone
            for index, (datum, payload) in enumerate(zip(data, payloads, strict=True)):
                if datum is not None and payload is not None:
                    try:
                        pa.array([datum], self.plain_type)
                    except Exception as e:  # noqa: BLE001 - that datum's error
                        unfit(index, payload, f"value does not fit its column: {e}")
            return pa.array(data, self.plain_type)

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
        readable, check, strict = self._readable(writer)
        try:
            check(payload, body.tell())
        except AvroFault as fault:
            # An invalid string before the fault is the first error, as mz-avro reads.
            try:
                strict(payload, body.tell())
            except AvroFault as first:
                raise _AvroFraming(str(first)) from None
            raise _AvroFraming(str(fault)) from None
        except Incomplete:
            pass  # fastavro's reading names what is wrong
        datum = fastavro.schemaless_reader(body, readable, self.reader_schema)
        if body.tell() != len(payload):
            raise _AvroFraming(f"{len(payload) - body.tell()} bytes left over after the datum")
        if isinstance(datum, dict):  # a record's: only a record has top-level unions
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


def _avro_reason(error: Exception) -> str:
    """Materialize's words for what fastavro (or the framing) found wrong with a datum."""
    if isinstance(error, _AvroFraming):
        return str(error)
    if isinstance(error, (EOFError, struct.error)):
        return "unexpected end of datum"
    if isinstance(error, UnicodeDecodeError):
        return "String was not valid UTF-8"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
