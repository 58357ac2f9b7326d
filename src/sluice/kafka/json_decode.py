"""The JSON decoder: valid JSON text kept as written, which Spark's `parse_json` turns into
a variant, every other text its message's error in serde_json's words.

Python's parser decides the common case fast; what it refuses, or what may hold what
serde_json or Spark refuses though Python takes it, is read again by kafka/json_scan.py.
Debezium's JSON strings inside Avro datums are checked here too, with Materialize's texts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from sluice.kafka.decode import DecodeFailure, Decoder, decode_each
from sluice.kafka.json_scan import (
    JSON_MAX_DEPTH,
    JSON_MAX_KEY_LENGTH,
    NUMERIC_MAX_PRECISION,
    numeric_fits,
    out_of_range,
    serde_problem,
    utf16_units,
)

# Of what Spark's `parse_json` refuses (kafka/json_scan.py), its size: a document of at most
# 16 MiB holds no string beyond Jackson's 20 million units and makes a variant (a few times
# the text at most) below the variant builder's 128 MiB limit.
JSON_MAX_BYTES = 16 * 1024 * 1024

# A string (an unterminated one runs to the end, so that no quote is scanned twice) or a
# bracket.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*\\?(?:"|\Z)|[\[\]{}]', re.DOTALL)
# A text read with every digit as 0, E as e, D as d and no signs: before a string holds an
# unpaired surrogate, it holds an escaped surrogate (`\ud`); before a number leaves
# numeric's range or the length limit, it holds an exponent of two digits (`e00`) or a run
# of 30 digits — with an exponent of one digit (|e| ≤ 9) the leading digit of a number
# beyond the range stands at least 30 places from the point, so the digits before the point
# (or the zeros after it) run to 30; a number of 1000 characters has one of the two. Three
# substring searches, where a regular expression costs more than parsing the text.
_SCREEN = bytes.maketrans(b"123456789ED", b"000000000ed")
_DIGITS_RUN = b"0" * (NUMERIC_MAX_PRECISION - 9)


def _reject_constant(name: str) -> None:
    raise ValueError(f"invalid JSON constant {name}")


def _json_number(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """A number hook for the JSON parser refusing what Spark cannot hold."""

    def checked(literal: str):
        if numeric_fits(literal):
            return convert(literal)
        raise ValueError(out_of_range(literal))

    return checked


# Made once: `json.loads` with hooks makes a parser per call, costing a third of a parse.
_JSON = json.JSONDecoder(parse_constant=_reject_constant)
_CHECKED_JSON = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_json_number(int), parse_float=_json_number(float)
)


def _too_deep(text: str) -> bool:
    """Whether a bracket of `text` nests deeper than JSON_MAX_DEPTH."""
    if len(text) <= JSON_MAX_DEPTH or text.count("[") + text.count("{") <= JSON_MAX_DEPTH:
        return False
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        first = text[token.start()]
        if first in "[{":
            depth += 1
            if depth > JSON_MAX_DEPTH:
                return True
        elif first in "]}":
            depth -= 1
    return False


def _string_fits(text: str, is_key: bool) -> bool:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False  # an unpaired surrogate
    # A code point is one or two UTF-16 units (Jackson counts units).
    return not is_key or len(text) <= JSON_MAX_KEY_LENGTH // 2 or utf16_units(text) <= JSON_MAX_KEY_LENGTH


def _representable(value: Any) -> bool:
    """Whether Spark holds every string and key of a parsed document: no unpaired
    surrogate, no overlong key."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            fits = _string_fits(item, is_key=False)
        elif isinstance(item, dict):
            fits = all(_string_fits(k, is_key=True) for k in item)
            pending.extend(item.values())
        elif isinstance(item, list):
            fits = True
            pending.extend(item)
        else:
            fits = True
        if not fits:
            return False
    return True


def _may_be_unrepresentable(payload: bytes) -> bool:
    """Whether a JSON text could hold a number, string or key Spark cannot: one with a long
    run of digits or a long exponent, an escaped surrogate, or a key's worth of bytes."""
    if len(payload) > JSON_MAX_KEY_LENGTH:
        return True
    screened = payload.translate(_SCREEN, b"+-")
    return b"\\ud" in screened or b"e00" in screened or _DIGITS_RUN in screened


def _json_problem(payload: bytes, text: str | None) -> str | None:
    """Why `payload` (`text` decoded, None when it is not UTF-8) is not a JSON document that
    jsonb and Spark's `parse_json` hold, in serde_json's words, or None.

    Python's parser decides the common case fast — checking numbers and strings only in a
    text that could hold what Spark refuses. A text it refuses, or that holds what serde_json
    or Spark refuses though Python takes it (NaN, an unpaired surrogate, nesting past
    serde_json's limit, a number out of range, an overlong key), is read again as
    serde_json reads it, which names the first problem. serde_json reads only UTF-8 (bytes
    beyond ASCII only inside strings, which it checks), so a payload that is not UTF-8
    always has one."""
    if text is not None:
        try:
            if not _too_deep(text):
                if not _may_be_unrepresentable(payload):
                    _JSON.decode(text)
                    return None
                if _representable(_CHECKED_JSON.decode(text)):
                    return None
        except (ValueError, RecursionError):
            pass
    return serde_problem(payload)


class JsonDecoder(Decoder):
    """Valid JSON text that Spark's `parse_json` turns into a variant, kept as written."""

    arrow_type = pa.string()

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, self._one)

    @staticmethod
    def _one(payload: bytes, _index: int) -> str:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        problem: str | None
        if len(payload) > JSON_MAX_BYTES:
            problem = f"document of {len(payload)} bytes exceeds the limit of {JSON_MAX_BYTES}"
        else:
            problem = _json_problem(payload, text)
        if problem is not None:
            raise DecodeFailure(f"Failed to decode JSON: {problem}")
        # Only a payload that is not UTF-8 has no text, and serde_json always finds its
        # problem; were one missed, decoding it again fails loudly, not as a NULL.
        return payload.decode("utf-8") if text is None else text


def debezium_json_problem(value: Any) -> str | None:
    """Materialize's text for a Debezium JSON string that is not a JSON document jsonb
    holds: serde_json's category of the failure (Eof, Syntax or Data)."""
    if not isinstance(value, str):
        return None
    problem = _json_problem(value.encode("utf-8", "surrogatepass"), value)
    if problem is None:
        return None
    if problem.startswith("recursion limit"):
        category = "Syntax"
    else:
        try:
            _JSON.decode(value)
            category = "Data"  # parsed, but holds what jsonb cannot (a number, a key)
        except ValueError as e:
            category = "Eof" if getattr(e, "pos", 0) >= len(value.rstrip()) else "Syntax"
    return f"Json decoding failed: {category}"
