"""What every message decoder promises, and the one interface the Kafka reader asks of them.

Message keys and values decode inside the reader's Python pass, into Arrow columns: JSON
(kafka/json_decode.py), CSV (kafka/csv_decode.py) and Avro (kafka/avro_decode.py) decode
there, in the pass that already touches every message (one JVM↔Python hop instead of two).
Spark's own `parse_json` accepts trailing garbage (`1 2` reads as `1`) and its CSV reader
turns empty fields into NULL, so neither is faithful enough for a decoder that must report
every bad message. TEXT and BYTES stay Spark-native.

Each decoder turns a list of payloads into (data column, error column): for a payload that
decodes, the data and a NULL error; for one that does not, NULL data and the error text
`<kind> (original text: …, original bytes: "…")`, exactly as DESIGN §4 words it after
`Decode error: `. NULL payloads (tombstones, missing keys) give NULL and no error. A JSON
error is serde_json's, at its line and column, as Materialize prints it.

No payload makes a decoder raise, and the Arrow columns of a batch always build: what
Arrow or Spark cannot hold is a decode error of its own message — an Avro `int` beyond 32
bits, a decimal beyond its precision, a date, timestamp or time out of range
(kafka/avro_columns.py), JSON that Spark's `parse_json` would refuse. A hostile payload
costs no more than its size: JSON nesting is measured before Python's recursive parser
sees it, Avro writer schemas whose datums could nest as deep as their bytes (recursive
types) are refused instead of read (kafka/avro_schema.py), and arrays of items that take
no bytes are bounded per datum (kafka/avro_check.py, which also refuses the bytes fastavro
would read into values no writer wrote).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa


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


def decode_each(
    payloads: Sequence[bytes | None], decode_one: Callable[[bytes, int], Any]
) -> tuple[list[Any], list[str | None]]:
    """(data, errors) for `payloads`: `decode_one(payload, index)` gives a datum or raises
    DecodeFailure, whose text gets the payload's description appended."""
    data: list[Any] = []
    errors: list[str | None] = []
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


class Decoder:
    """What the reader asks of a decoder: the Arrow type of its data column, and a batch's
    (data, error) columns."""

    arrow_type: pa.DataType

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        raise NotImplementedError

    def columns(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[pa.Array, pa.Array]:
        data, errors = self.decode(payloads, offsets)
        return pa.array(data, self.arrow_type), pa.array(errors, pa.string())
