"""A JSON text as Materialize reads a jsonb value, and what jsonb and Spark hold.

The limits a JSON document must keep (nesting, a number's text and range, a key's length)
and serde_json's own reading of a text, which names the first thing wrong with it in
serde_json's words at its line and column (`serde_problem`). kafka/json_decode.py runs it
only on a text Python's faster parser refuses, or on one that may hold what Spark refuses.
"""

from __future__ import annotations

import json
import re
from typing import NoReturn


def _clipped(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# Materialize parses JSON with serde_json, whose recursion limit refuses a 128th level of
# nesting (Spark's `parse_json` would take 1000, Python's parser about as many before its
# own recursion limit).
JSON_MAX_DEPTH = 127
# What Spark's `parse_json` refuses though Python's parser accepts it (Jackson's read
# constraints, the variant builder's size limit): refused by the JSON decoder first, since
# a text it accepts becomes a variant on Spark, and a refusal there fails the whole task.
# Numbers: at most 1000 characters (Jackson's limit on a number's text), and by value
# within numeric's range, as jsonb numbers are numeric in Materialize (1e-39 ≤ |x| < 1e39,
# or 0) — Spark would read what lies beyond as a double, silently `Infinity` or 0 past a
# double's range; keys: at most 50,000 UTF-16 units; documents: JSON_MAX_BYTES
# (kafka/json_decode.py).
JSON_MAX_NUMBER_LENGTH = 1000
NUMERIC_MAX_PRECISION = 39
JSON_MAX_KEY_LENGTH = 50_000


def numeric_fits(literal: str) -> bool:
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


def out_of_range(literal: str) -> str:
    """Materialize's text for a jsonb number numeric cannot hold."""
    return f'"{_clipped(literal)}" is out of range for type numeric'


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class _SerdeStop(Exception):
    """Where serde_json stops reading a text; its message is the error's text."""


# Runs of bytes the scan skips (`run_end`).
_WHITESPACE = re.compile(rb"[ \t\n\r]+")
_PLAIN_STRING = re.compile(rb'[^"\\\x00-\x1f]+')
_DIGITS = re.compile(rb"[0-9]+")
_HEX_DIGITS = re.compile(rb"[0-9a-fA-F]+")
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

    def run_end(self, run: re.Pattern[bytes], limit: int | None = None) -> int:
        """Where the run of bytes `run` matches from `self.at` ends (at `limit` at most);
        `self.at` when none starts there."""
        found = run.match(self.data, self.at, len(self.data) if limit is None else limit)
        return self.at if found is None else found.end()

    def skip_whitespace(self) -> int | None:
        self.at = self.run_end(_WHITESPACE)
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
            self.at = self.run_end(_DIGITS)
        else:
            self.stop("invalid number")
        if self.peek() == _DOT:
            self.at += 1
            end = self.run_end(_DIGITS)
            if end == self.at:
                self.stop_peeked("invalid number" if self.at < len(self.data) else "EOF while parsing a value")
            self.at = end
        if self.peek() in (ord("e"), ord("E")):
            self.at += 1
            if self.peek() in (ord("+"), _MINUS):
                self.at += 1
            if not 0x30 <= self.next_byte("EOF while parsing a value") <= 0x39:
                self.stop("invalid number")
            self.at = self.run_end(_DIGITS)
        literal = self.data[start : self.at].decode("ascii")
        if not numeric_fits(literal):
            raise _SerdeStop(out_of_range(literal))

    def string(self, is_key: bool) -> None:
        """A string's body and closing quote (serde_json's `parse_str`, which checks UTF-8 at
        the closing quote); a key beyond Spark's length."""
        start = self.at
        while True:
            self.at = self.run_end(_PLAIN_STRING)
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
            units = utf16_units(json.loads(self.data[start - 1 : self.at]))
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
        digits = self.run_end(_HEX_DIGITS, self.at + 4) - self.at
        if digits < 4:
            self.at += digits + 1
            self.stop("invalid escape")
        self.at += 4
        return int(self.data[self.at - 4 : self.at], 16)


def serde_problem(data: bytes) -> str | None:
    """The first thing serde_json (or jsonb's and Spark's limits) finds wrong with `data`,
    in its words and at its position, or None."""
    return _SerdeScan(data).problem()
