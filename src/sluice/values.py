"""Values as text for people: one rendering shared by the REPL, `sluice run` and the
sqllogic runner, with NULL as `NULL`.

`pg_text` is PostgreSQL's text output of every type (booleans `t`/`f`, bytea `\\x…`,
timestamps, intervals, records `(a,b)`, arrays `{a,b}`), numeric as Materialize prints it
(trailing zeros trimmed, whatever the scale); jsonb arrives as its JSON text. `slt_value`
is the form sqllogictest results are compared in (DESIGN.md §7): the same text with
booleans `true`/`false`, `(empty)` for an empty string, and the column's type letter
deciding how numbers print. `value_text` is the rendering goldens, `sluice
plan` and SUBSCRIBE in the REPL show rows in: PostgreSQL's text with booleans
`true`/`false`.
"""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal
from typing import Any


def value_text(value: Any) -> str:
    return pg_text(value, booleans=_WORDS)


def slt_value(value: Any, type_letter: str = "T", mode: str = "standard") -> str:
    """`value` as a sqllogictest result value of a column typed `type_letter`, as
    SQLite's and Materialize's runners print it (sqllogic/README.md says where they
    differ and which one sluice follows).

    `I` prints numbers as integers (truncated toward zero), booleans `1`/`0`, and text
    that is not an integer `0`; `R` prints numbers with three decimals (`%.3f`), in
    `cockroach` mode a float or numeric in full; anything else prints in PostgreSQL's
    text form. Whatever the letter: NULL → `NULL`, booleans `true`/`false` (inside
    records `t`/`f`), the empty string `(empty)`, bytea `\\x` + lowercase hex, jsonb
    (compact JSON text) as it is, timestamps `YYYY-MM-DD HH:MM:SS[.ffffff]` with
    trailing zeros of the fraction dropped.
    """
    if value is None:
        return "NULL"
    letter = type_letter.upper()
    if isinstance(value, bool):
        if letter == "I":
            return "1" if value else "0"
        return "true" if value else "false"
    if letter == "R" and isinstance(value, (int, float, Decimal)):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            return _float_text(number)
        if mode == "cockroach" and not isinstance(value, int):
            return pg_text(value)
        return "%.3f" % number
    if letter == "I" and isinstance(value, (int, float, Decimal)):
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            return _float_text(value)
        return str(int(value))
    if letter == "I" and isinstance(value, str):
        # Text is 0 to both runners, but SQLite reads an integer's digits as the integer.
        return str(int(value)) if _INTEGER.fullmatch(value) else "0"
    text = pg_text(value, booleans=_WORDS)
    return "(empty)" if text == "" else text


_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
_LETTERS = ("t", "f")
_WORDS = ("true", "false")


def pg_text(value: Any, *, booleans: tuple[str, str] = _LETTERS) -> str:
    """`value` in PostgreSQL's output form (NULL as `NULL` at the top level); `booleans`
    are the texts of a boolean `value` (inside records and arrays, always `t`/`f`)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return booleans[0] if value else booleans[1]
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, Decimal):
        return _numeric_text(value) if value.is_finite() else _float_text(float(value))
    if isinstance(value, datetime.datetime):
        return _timestamp_text(value)
    if isinstance(value, datetime.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, datetime.time):
        return _clock_text(value.hour, value.minute, value.second, value.microsecond)
    if isinstance(value, datetime.timedelta):
        return _interval_text(value)
    if isinstance(value, dict):  # a map (PostgreSQL has none): hstore's k=>v, in the map's order
        inner = ",".join(
            f"{_element(k, '{}')}=>{'NULL' if v is None else _element(v, '{}')}"
            for k, v in value.items()
        )
        return "{" + inner + "}"
    if isinstance(value, tuple):  # a record (Spark's Row is a tuple): PostgreSQL's (a,b)
        return "(" + ",".join("" if v is None else _element(v, "()") for v in value) + ")"
    if isinstance(value, list):  # an array: PostgreSQL's {a,b}
        return "{" + ",".join("NULL" if v is None else _element(v, "{}") for v in value) + "}"
    return str(value)


def _element(value: Any, brackets: str) -> str:
    return _quoted(pg_text(value), brackets)


def _numeric_text(value: Decimal) -> str:
    """Materialize's numeric output: no exponent, no trailing fractional zeros."""
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _quoted(text: str, brackets: str) -> str:
    """An element of a record or array, double-quoted when PostgreSQL would quote it.

    Inside the quotes an array (array_out) escapes `"` and `\\` with a backslash, a record
    (record_out) doubles them; only an array element spelled NULL needs quoting."""
    special = set(brackets) | set(',"\\ \t\n\r\v\f')
    record = brackets == "()"
    if text and not (set(text) & special) and (record or text.upper() != "NULL"):
        return text
    if record:
        return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _float_text(value: float) -> str:
    """PostgreSQL's float8 output: shortest round-trip digits, no `.0` on whole numbers."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e15:
        return "-0" if value == 0 and math.copysign(1, value) < 0 else str(int(value))
    text = repr(value)
    if "e" in text:  # 1e+20 → 1e+20 (as PostgreSQL), 1e-07 → 1e-07
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        return f"{mantissa}e{sign}{abs(int(exponent)):02d}"
    return text


def _clock_text(hour: int, minute: int, second: int, microsecond: int) -> str:
    text = f"{hour:02d}:{minute:02d}:{second:02d}"
    if microsecond:
        text += ("." + f"{microsecond:06d}").rstrip("0")
    return text


def _timestamp_text(value: datetime.datetime) -> str:
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
        + _clock_text(value.hour, value.minute, value.second, value.microsecond)
    )
    offset = value.utcoffset()
    if offset is not None:  # timestamptz: PostgreSQL's +HH[:MM]
        minutes = int(offset.total_seconds()) // 60
        sign = "-" if minutes < 0 else "+"
        hours, minutes = divmod(abs(minutes), 60)
        text += f"{sign}{hours:02d}" + (f":{minutes:02d}" if minutes else "")
    return text


def _interval_text(value: datetime.timedelta) -> str:
    """PostgreSQL's interval output for a day-time interval: `1 day 02:03:04.5`."""
    negative = value < datetime.timedelta(0)
    value = -value if negative else value
    days = value.days
    seconds, microsecond = value.seconds, value.microseconds
    hours, rest = divmod(seconds, 3600)
    minutes, second = divmod(rest, 60)
    parts = []
    if days:
        parts.append(f"{'-' if negative else ''}{days} day{'s' if days != 1 else ''}")
    if seconds or microsecond or not days:
        clock = _clock_text(hours, minutes, second, microsecond)
        parts.append(("-" if negative else "") + clock)
    return " ".join(parts)
