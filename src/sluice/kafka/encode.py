"""Encoding message keys and values into the bytes a Kafka message carries.

The one place that turns text or a datum into payload bytes, used by everything that
writes messages: the sqllogic runner's `kafka-ingest`, the command-line producer, sinks.
The inverse of `kafka/decode.py` for the formats that have a byte form:

* `literal(text)` — the UTF-8 bytes of a line, each `\\xHH` standing for the byte HH, so a
  test or a user can write corrupt bytes on purpose; `escaped(data)` is its inverse, the
  one-line text a consumer prints;
* `split_key(line, separator)` and `keyed_message` — a `key SEP value` line as a message:
  an empty side is null, so `k:` is a tombstone and `:v` has a null key;
* `encode_value(text, schema, schema_id)` — a line's value: literal bytes, or Avro (framed
  for a registry when it has a schema id);
* `avro_from_json(text, schema)` — a datum in Avro's JSON encoding (unions written
  `{"type": value}`, as Avro's JSON decoder reads them) as Avro binary;
* `avro_datum(schema, datum)` — a Python datum as Avro binary;
* `confluent_frame(schema_id, body)` — the Confluent wire format: magic byte 0, the
  4-byte big-endian schema id, then the body.

Failures are `ValueError` with a message fit to show beside the offending line.
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Callable
from typing import Any

import fastavro

_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")
# What `escaped` writes as `\xHH`: control characters (a message stays one line, tabs stay
# column separators), and a backslash that `literal` would otherwise read as an escape.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]|\\(?=x[0-9a-fA-F]{2})")


def literal(text: str) -> bytes:
    """The UTF-8 bytes of `text`, each `\\xHH` standing for the byte HH."""
    raw = text.encode("utf-8", "surrogateescape")
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)


def escaped(data: bytes) -> str:
    """`data` as one line of text that `literal` reads back as the same bytes: UTF-8 where
    it is valid, `\\xHH` for every other byte and for control characters."""
    pieces = []
    while data:
        try:
            text, data = data.decode("utf-8"), b""
        except UnicodeDecodeError as e:
            text, bad, data = data[: e.start].decode("utf-8"), data[e.start : e.end], data[e.end :]
            pieces.append(_escape_text(text) + "".join(f"\\x{b:02x}" for b in bad))
            continue
        pieces.append(_escape_text(text))
    return "".join(pieces)


def _escape_text(text: str) -> str:
    return _UNPRINTABLE.sub(lambda m: "".join(f"\\x{b:02x}" for b in m.group().encode()), text)


def split_key(line: str, separator: str) -> tuple[str | None, str | None]:
    """`key SEP value` split at the first `separator`, an empty side None. ValueError if
    the line has no separator."""
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f"no key separator {separator!r} in the line")
    return key or None, value or None


def keyed_message(
    line: str, separator: str, encode: Callable[[str], bytes]
) -> tuple[bytes | None, bytes | None]:
    """The (key, value) of a `key SEP value` line: the key literal, the value `encode`d,
    a missing side None (a null key; a tombstone)."""
    key, value = split_key(line, separator)
    return (
        None if key is None else literal(key),
        None if value is None else encode(value),
    )


def encode_value(
    text: str, schema: Any = None, schema_id: int | None = None, *, schema_name: str = "the schema"
) -> bytes:
    """A line's value: its `literal` bytes without a schema; with the parsed Avro `schema`,
    the datum `text` in Avro binary, in the Confluent wire format under `schema_id` if given."""
    if schema is None:
        return literal(text)
    body = avro_from_json(text, schema, schema_name=schema_name)
    return body if schema_id is None else confluent_frame(schema_id, body)


def avro_datum(schema: Any, datum: Any) -> bytes:
    """`datum` in Avro binary under the parsed `schema`."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, datum)
    return body.getvalue()


def avro_from_json(text: str, schema: Any, *, schema_name: str = "the schema") -> bytes:
    """The Avro binary of `text`, a datum of the parsed `schema` in Avro's JSON encoding."""
    try:
        datum = next(iter(fastavro.json_reader(io.StringIO(text), schema)))
        return avro_datum(schema, datum)
    except Exception as e:
        raise ValueError(
            f"not a datum of {schema_name} in Avro's JSON encoding: {type(e).__name__}: {e}"
        ) from None


def confluent_frame(schema_id: int, body: bytes) -> bytes:
    """`body` in the Confluent wire format under registry schema `schema_id`."""
    return b"\x00" + struct.pack(">I", schema_id) + body
