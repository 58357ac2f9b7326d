"""A pure-Python reference model of ENVELOPE UPSERT, written from DESIGN §4 (not from the
implementation): TEXT keys, JSON values, optional VALUE DECODING ERRORS = INLINE.

`Message` is (partition, offset, key bytes | None, value bytes | None). The model answers
the rows a query over the source shows and the errors standing in it.
"""

from __future__ import annotations

import json
from typing import NamedTuple

NULL_KEY = (
    "Envelope error: Upsert: Null key: record with NULL key in UPSERT source; to retract "
    "this error, produce a record upstream with a NULL key and NULL value"
)


class Message(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def original(payload: bytes) -> str:
    try:
        return f'(original text: {payload.decode("utf-8")}, original bytes: "{payload.hex()}")'
    except UnicodeDecodeError:
        return f'(original bytes: "{payload.hex()}")'


def decode_key(payload: bytes) -> str:
    """The key's text, or raises ValueError with the decode error."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"Failed to decode UTF-8 {original(payload)}") from None


def decode_value(payload: bytes) -> str:
    """The value as compact JSON text, or raises ValueError with the decode error."""
    try:
        text = payload.decode("utf-8")
        return json.dumps(json.loads(text), separators=(",", ":"))
    except UnicodeDecodeError:
        raise ValueError(f"Failed to decode UTF-8 {original(payload)}") from None
    except json.JSONDecodeError as e:
        # serde_json's words, as Materialize prints them, for the one kind of bad value the
        # tests send: an object whose key is not a string (its column: the byte serde_json
        # stopped at, 1-based).
        assert e.msg == "Expecting property name enclosed in double quotes", e.msg
        raise ValueError(
            f"Failed to decode JSON: key must be a string at line {e.lineno} column {e.colno} {original(payload)}"
        ) from None


def upsert(messages: list[Message], *, inline: bool = False) -> tuple[set, set]:
    """(rows, errors): rows are (key, data) — (key, error text, data) with INLINE — and
    errors are the messages a query over the source would fail with."""
    state: dict[bytes | None, Message] = {}
    # Keyed by raw bytes: a key that does not decode, and the NULL key, are keys too.
    for message in sorted(messages, key=lambda m: (m.partition, m.offset)):
        if message.value is None:
            state.pop(message.key, None)
        else:
            state[message.key] = message
    rows, errors = set(), set()
    for raw_key, message in state.items():
        if raw_key is None:
            errors.add(NULL_KEY)
            continue
        try:
            key = decode_key(raw_key)
        except ValueError as e:
            errors.add(f"Envelope error: Upsert: Key decode: {e}")
            continue
        try:
            data = decode_value(message.value)
        except ValueError as e:
            if inline:
                rows.add((key, str(e), None))
            else:
                errors.add(
                    f'Envelope error: Upsert: Value error: {e}, decoded key: Row{{[String("{key}")]}}'
                )
            continue
        rows.add((key, None, data) if inline else (key, data))
    return rows, errors
