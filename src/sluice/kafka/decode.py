"""Decoding message keys and values inside the reader's Python pass, into Arrow columns.

JSON, CSV and Avro decode here, in the pass that already touches every message (one
JVM↔Python hop instead of two). Spark's own `parse_json` accepts trailing garbage (`1 2`
reads as `1`) and its CSV reader turns empty fields into NULL, so neither is faithful
enough for a decoder that must report every bad message. TEXT and BYTES stay Spark-native.

Each decoder turns a list of payloads into (data column, error column): for a payload that
decodes, the data and a NULL error; for one that does not, NULL data and the error text
`<kind> (original text: …, original bytes: "…")`, exactly as DESIGN §4 words it after
`Decode error: `. NULL payloads (tombstones, missing keys) give NULL and no error. A JSON
error is serde_json's, at its line and column, as Materialize prints it.

No payload makes a decoder raise, and the Arrow columns of a batch always build: what
Arrow or Spark cannot hold is a decode error of its own message — an Avro `int` beyond 32
bits, a decimal beyond its precision, a date, timestamp or time out of range, JSON that
Spark's `parse_json` would refuse. A hostile payload costs no more than its size: JSON
nesting is measured before Python's recursive parser sees it, Avro writer schemas whose
datums could nest as deep as their bytes (recursive types) are refused instead of read,
and arrays of items that take no bytes are bounded per datum (kafka/avro_check.py, which
also refuses the bytes fastavro would read into values no writer wrote).
"""

from __future__ import annotations

import csv
import io
import json
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn

import fastavro
import pyarrow as pa
import pyarrow.compute as pc

from sluice.kafka.avro_check import AvroFault, Incomplete, checker
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


class _Decoder:
    """What the reader asks of a decoder: the Arrow type of its data column, and a batch's
    (data, error) columns."""

    arrow_type: pa.DataType

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        raise NotImplementedError

    def columns(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[pa.Array, pa.Array]:
        data, errors = self.decode(payloads, offsets)
        return pa.array(data, self.arrow_type), pa.array(errors, pa.string())


def _clipped(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# Materialize parses JSON with serde_json, whose recursion limit refuses a 128th level of
# nesting (Spark's `parse_json` would take 1000, Python's parser about as many before its
# own recursion limit).
JSON_MAX_DEPTH = 127
# What Spark's `parse_json` refuses though Python's parser accepts it (Jackson's read
# constraints, the variant builder's size limit): refused here first, since a text this
# decoder accepts becomes a variant on Spark, and a refusal there fails the whole task.
# Numbers: at most 1000 characters (Jackson's limit on a number's text), and by value
# within numeric's range, as jsonb numbers are numeric in Materialize (1e-39 ≤ |x| < 1e39,
# or 0) — Spark would read what lies beyond as a double, silently `Infinity` or 0 past a
# double's range; keys: at most 50,000 UTF-16 units. A document of at most 16 MiB holds no
# string beyond Jackson's 20 million units and makes a variant (a few times the text at
# most) below its 128 MiB limit.
JSON_MAX_BYTES = 16 * 1024 * 1024
JSON_MAX_NUMBER_LENGTH = 1000
NUMERIC_MAX_PRECISION = 39
JSON_MAX_KEY_LENGTH = 50_000

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


def _numeric_fits(literal: str) -> bool:
    """Whether a JSON number's text is one jsonb and Spark hold: at most
    JSON_MAX_NUMBER_LENGTH characters, and by value 0 or 1e-39 ≤ |x| < 1e39. The value is
    read from the digits and the exponent together, however the number is spelled
    (`1000e36` is `1e39`), and no number is built: an exponent costs its digits."""
    if len(literal) > JSON_MAX_NUMBER_LENGTH:
        return False
    mantissa, _, exponent = literal.lower().partition("e")
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    digits = whole + fraction
    significant = digits.lstrip("0")
    if not significant:
        return True
    # The power of ten of the leading significant digit.
    leading = len(whole) - 1 - (len(digits) - len(significant)) + int(exponent or "0")
    return -NUMERIC_MAX_PRECISION <= leading < NUMERIC_MAX_PRECISION


def _out_of_range(literal: str) -> str:
    """Materialize's text for a jsonb number numeric cannot hold."""
    return f'"{_clipped(literal)}" is out of range for type numeric'


def _json_number(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """A number hook for the JSON parser refusing what Spark cannot hold."""

    def checked(literal: str):
        if _numeric_fits(literal):
            return convert(literal)
        raise ValueError(_out_of_range(literal))

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
    return not is_key or len(text) <= JSON_MAX_KEY_LENGTH // 2 or _utf16_units(text) <= JSON_MAX_KEY_LENGTH


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


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


class _SerdeStop(Exception):
    """Where serde_json stops reading a text; its message is the error's text."""


_WHITESPACE = re.compile(rb"[ \t\n\r]*")
_PLAIN_STRING = re.compile(rb'[^"\\\x00-\x1f]*')
_DIGITS = re.compile(rb"[0-9]*")
_HEX_DIGITS = re.compile(rb"[0-9a-fA-F]*")
_SIMPLE_ESCAPES = frozenset(b'"\\/bfnrt')
_IDENT_RESTS = {ord("n"): b"ull", ord("t"): b"rue", ord("f"): b"alse"}
_QUOTE, _BACKSLASH, _COMMA, _COLON, _MINUS, _DOT = b'"\\,:-.'
_CLOSING = {ord("["): ord("]"), ord("{"): ord("}")}
# serde_json's `ErrorCode` texts for what a container lacks, by its opening bracket.
_EOF_IN = {ord("["): "EOF while parsing a list", ord("{"): "EOF while parsing an object"}
_COMMA_OR_END = {ord("["): "expected `,` or `]`", ord("{"): "expected `,` or `}`"}


class _SerdeScan:
    """A JSON text read as Materialize reads a jsonb value — serde_json's
    `Deserializer::from_slice`, any value, then `end()` — to find the first thing wrong with
    it in serde_json's words and at its position: `<error> at line L column C`, the column
    counting the bytes of its line up to the one serde_json stopped after (`error`) or at
    (`peek_error`, one byte further). Where serde_json's visitor would take a value, the
    limits of jsonb and Spark are checked (a number's range, a key's length).

    Run only on a text Python's parser refuses or one that may hold what Spark refuses: it
    reads a byte at a time where it must (its regular expressions skip the rest), and keeps
    the open containers on a list, not the stack."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0  # the next byte to read, as serde_json's `SliceRead::index`

    def problem(self) -> str | None:
        try:
            self.document()
        except _SerdeStop as stop:
            return str(stop)
        return None

    def stop(self, code: str, at: int | None = None) -> NoReturn:
        at = self.at if at is None else at
        line_start = self.data.rfind(b"\n", 0, at) + 1
        line = self.data.count(b"\n", 0, line_start) + 1
        raise _SerdeStop(f"{code} at line {line} column {at - line_start}")

    def stop_peeked(self, code: str) -> NoReturn:
        self.stop(code, min(len(self.data), self.at + 1))

    def next_byte(self, eof_code: str) -> int:
        if self.at == len(self.data):
            self.stop(eof_code)
        self.at += 1
        return self.data[self.at - 1]

    def peek(self) -> int | None:
        return self.data[self.at] if self.at < len(self.data) else None

    def skip_whitespace(self) -> int | None:
        self.at = _WHITESPACE.match(self.data, self.at).end()
        return self.peek()

    def document(self) -> None:
        open_brackets: list[list] = []  # per open container: [its bracket, whether no item came yet]
        self.value(open_brackets)
        while open_brackets:
            if self.next_item(open_brackets[-1]):
                self.value(open_brackets)
            else:
                open_brackets.pop()
        if self.skip_whitespace() is not None:
            self.stop_peeked("trailing characters")

    def value(self, open_brackets: list[list]) -> None:
        """Reads a value; a container is only opened (its items are the caller's)."""
        first = self.skip_whitespace()
        if first is None:
            self.stop_peeked("EOF while parsing a value")
        if first in _CLOSING:
            if len(open_brackets) == JSON_MAX_DEPTH:
                self.stop_peeked("recursion limit exceeded")
            self.at += 1
            open_brackets.append([first, True])
        elif first == _QUOTE:
            self.at += 1
            self.string(is_key=False)
        elif first == _MINUS or 0x30 <= first <= 0x39:
            self.number()
        elif first in _IDENT_RESTS:
            self.at += 1
            for expected in _IDENT_RESTS[first]:
                if self.next_byte("EOF while parsing a value") != expected:
                    self.stop("expected ident")
        else:
            self.stop_peeked("expected value")

    def next_item(self, container: list) -> bool:
        """Whether the innermost open container has another item (an object's key and colon
        read) rather than its end (read)."""
        bracket, no_item_yet = container
        found = self.skip_whitespace()
        if found == _CLOSING[bracket]:
            self.at += 1
            return False
        if found == _COMMA and not no_item_yet:
            self.at += 1
            found = self.skip_whitespace()
        elif found is None:
            self.stop_peeked(_EOF_IN[bracket])
        elif no_item_yet:
            container[1] = False
        else:
            self.stop_peeked(_COMMA_OR_END[bracket])
        if found == _CLOSING[bracket]:
            self.stop_peeked("trailing comma")
        if found is None:
            self.stop_peeked("EOF while parsing a value")
        if bracket == ord("{"):
            if found != _QUOTE:
                self.stop_peeked("key must be a string")
            self.at += 1
            self.string(is_key=True)
            found = self.skip_whitespace()
            if found is None:
                self.stop_peeked("EOF while parsing an object")
            if found != _COLON:
                self.stop_peeked("expected `:`")
            self.at += 1
        return True

    def number(self) -> None:
        """serde_json's `arbitrary_precision` scan of a number; its text, numeric's range."""
        start = self.at
        if self.data[self.at] == _MINUS:
            self.at += 1
        leading = self.next_byte("EOF while parsing a value")
        if leading == 0x30:
            if self.at < len(self.data) and 0x30 <= self.data[self.at] <= 0x39:
                self.stop_peeked("invalid number")
        elif 0x31 <= leading <= 0x39:
            self.at = _DIGITS.match(self.data, self.at).end()
        else:
            self.stop("invalid number")
        if self.peek() == _DOT:
            self.at += 1
            end = _DIGITS.match(self.data, self.at).end()
            if end == self.at:
                self.stop_peeked("invalid number" if self.at < len(self.data) else "EOF while parsing a value")
            self.at = end
        if self.peek() in (ord("e"), ord("E")):
            self.at += 1
            if self.peek() in (ord("+"), _MINUS):
                self.at += 1
            if not 0x30 <= self.next_byte("EOF while parsing a value") <= 0x39:
                self.stop("invalid number")
            self.at = _DIGITS.match(self.data, self.at).end()
        literal = self.data[start : self.at].decode("ascii")
        if not _numeric_fits(literal):
            raise _SerdeStop(_out_of_range(literal))

    def string(self, is_key: bool) -> None:
        """A string's body and closing quote (serde_json's `parse_str`, which checks UTF-8 at
        the closing quote); a key beyond Spark's length."""
        start = self.at
        while True:
            self.at = _PLAIN_STRING.match(self.data, self.at).end()
            found = self.next_byte("EOF while parsing a string")
            if found == _QUOTE:
                break
            if found != _BACKSLASH:
                self.stop("control character (\\u0000-\\u001F) found while parsing a string")
            self.escape()
        body = self.data[start : self.at - 1]
        if not body.isascii():
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                self.stop("invalid unicode code point")
        if is_key and len(body) > JSON_MAX_KEY_LENGTH:  # a UTF-16 unit takes a byte at least
            units = _utf16_units(json.loads(self.data[start - 1 : self.at]))
            if units > JSON_MAX_KEY_LENGTH:
                raise _SerdeStop(f"object key of {units} characters exceeds the limit of {JSON_MAX_KEY_LENGTH}")

    def escape(self) -> None:
        """An escape after its backslash: a `\\u` escape of a surrogate must be the first of
        a pair."""
        kind = self.next_byte("EOF while parsing a string")
        if kind in _SIMPLE_ESCAPES:
            return
        if kind != ord("u"):
            self.stop("invalid escape")
        unit = self.hex_escape()
        if 0xDC00 <= unit <= 0xDFFF:
            self.stop("lone leading surrogate in hex escape")
        if 0xD800 <= unit <= 0xDBFF:
            for expected in b"\\u":
                if self.next_byte("EOF while parsing a string") != expected:
                    self.stop("unexpected end of hex escape")
            if not 0xDC00 <= self.hex_escape() <= 0xDFFF:
                self.stop("lone leading surrogate in hex escape")

    def hex_escape(self) -> int:
        """The four hex digits of a `\\u` escape."""
        if self.at + 4 > len(self.data):
            self.at = len(self.data)
            self.stop("EOF while parsing a string")
        digits = _HEX_DIGITS.match(self.data, self.at, self.at + 4).end() - self.at
        if digits < 4:
            self.at += digits + 1
            self.stop("invalid escape")
        self.at += 4
        return int(self.data[self.at - 4 : self.at], 16)


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
    return _SerdeScan(payload).problem()


class JsonDecoder(_Decoder):
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
        if len(payload) > JSON_MAX_BYTES:
            problem = f"document of {len(payload)} bytes exceeds the limit of {JSON_MAX_BYTES}"
        else:
            problem = _json_problem(payload, text)
        if problem is not None:
            raise DecodeFailure(f"Failed to decode JSON: {problem}")
        return text


@dataclass
class CsvDecoder(_Decoder):
    """One record per message; the record number in errors is the offset + 1."""

    column_count: int
    delimiter: str = ","

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.list_(pa.string())

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, lambda payload, i: self._one(payload, offsets[i] + 1))

    def _one(self, payload: bytes, record: int) -> list[str]:
        # Python's CSV reader refuses a field past a process-wide limit (128 KiB unless
        # raised); Materialize's has none, and no field is longer than its message.
        if len(payload) > csv.field_size_limit():
            csv.field_size_limit(len(payload))
        try:
            text = payload.decode("utf-8")
            rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter))
        except (UnicodeDecodeError, csv.Error) as e:
            raise DecodeFailure(f"CSV error at record number {record}: {e}") from None
        fields = rows[0] if rows else []
        if len(rows) > 1 or len(fields) != self.column_count:
            got = sum(len(r) for r in rows)
            raise DecodeFailure(
                f"CSV error at record number {record}: expected {self.column_count} columns, got {got}."
            )
        return fields


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

    def values(self, datum: Any) -> list:
        values = [datum]
        for step in self.path:
            inner = []
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


# Avro strings Debezium marks as JSON documents (Kafka Connect's `connect.name`): jsonb
# columns, as Materialize reads them.
DEBEZIUM_JSON = "io.debezium.data.Json"


def _debezium_json_problem(value: Any) -> str | None:
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


def _debezium_json_fits(column: pa.Array) -> bool:
    return all(_debezium_json_problem(v) is None for v in column.to_pylist())


# An Avro record of no fields (a record with none in SQL) as Arrow holds it: Parquet cannot
# write a struct of no fields, so a continuously ingested source could not commit one. Its
# one field is always NULL, so its text is `()` as an empty record's is in PostgreSQL.
EMPTY_RECORD = pa.struct([("_empty", pa.bool_())])


@dataclass
class _ArrowShape:
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
            self.leaves.append(_Leaf(path, _debezium_json_problem, _debezium_json_fits))
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


def _plain(schema: Any) -> Any:
    """`schema` (parsed or not) without the logical types of `_PLAIN_LOGICAL` and fastavro's
    own markers: fastavro reads their plain values."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        k: _plain(v)
        for k, v in schema.items()
        if not k.startswith("__") and not (k == "logicalType" and v in _PLAIN_LOGICAL)
    }


def _unbounded(schema: Any) -> str | None:
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


def parse_schema(schema: Any, named_schemas: dict | None = None) -> Any:
    """An Avro schema as fastavro reads it, taking the field defaults Materialize takes:
    fastavro refuses a primitive default of another JSON type (`1.0` for an int, `null`
    for a string), which Materialize reads only when a writer schema lacks the field.
    Such a default is dropped: reading a writer without the field is then that message's
    decode error, never a value of another type (or a NULL) in the column."""
    return fastavro.parse_schema(_usable_defaults(schema), named_schemas)


_DEFAULT_TYPES = {
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
        kinds = [_DEFAULT_TYPES.get(b) if isinstance(b, str) else None for b in branches]
        if None not in kinds and not any(isinstance(out["default"], k) for k in kinds):
            del out["default"]
    return out


class _AvroFraming(ValueError):
    pass


@dataclass
class AvroDecoder(_Decoder):
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
        self.reader_schema = parse_schema(_plain(schema), named)
        self.writers: dict[int, Any] = {}
        shape = _ArrowShape()
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
            problem = _unbounded(schema)
        except RecursionError:
            problem = "nesting too deep to check"
        return schema if problem is None else _AvroFraming(f"writer schema with {problem} is not supported")

    def _readable(self, writer: Any) -> tuple[Any, Callable, Callable]:
        """The writer schema as fastavro reads it (logical types left plain), with the
        strict checks of its datums (avro_check: without, then with UTF-8), once per writer."""
        if id(writer) not in self.readable:
            try:
                readable = self._bounded(writer if writer is self.reader_schema else parse_schema(_plain(writer)))
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

        def unfit(index: int, problem: str) -> None:
            data[index] = None
            errors[index] = f"avro deserialization error: {problem} {describe_bytes(payloads[index])}"

        for index, datum in enumerate(data):
            if datum is not None:
                problem = next(
                    (p for leaf in self.leaves for p in map(leaf.problem, leaf.values(datum)) if p is not None), None
                )
                if problem is not None:
                    unfit(index, problem)
        try:
            return pa.array(data, self.plain_type)
        except Exception:  # noqa: BLE001 - what the leaves do not name: each datum alone
            for index, datum in enumerate(data):
                if datum is not None:
                    try:
                        pa.array([datum], self.plain_type)
                    except Exception as e:  # noqa: BLE001 - that datum's error
                        unfit(index, f"value does not fit its column: {e}")
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
