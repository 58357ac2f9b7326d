"""Encoding message keys and values into the bytes a Kafka message carries.

The one place that turns text or a datum into payload bytes, used by everything that
writes messages: the sqllogic runner's `kafka-ingest`, the command-line producer, sinks.
The inverse of `kafka/decode.py` for the formats that have a byte form:

* `literal(text)` — the UTF-8 bytes of a line, each `\\xHH` standing for the byte HH, so a
  test or a user can write corrupt bytes on purpose;
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
from typing import Any

import fastavro

_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


def literal(text: str) -> bytes:
    """The UTF-8 bytes of `text`, each `\\xHH` standing for the byte HH."""
    raw = text.encode("utf-8", "surrogateescape")
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)


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
