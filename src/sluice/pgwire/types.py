"""sluice's column types as PostgreSQL's clients see them: type OIDs and sizes for a
RowDescription, values in text and binary format, and a Bind's parameter values read
back as SQL literals.

Records, lists and maps travel as text (OID 25) in PostgreSQL's text form, as do the
types clients have no OID for; text is always `values.pg_text` (booleans `t`/`f`).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sluice.errors import FeatureNotSupported, InvalidParameterValue
from sluice.values import pg_text

TEXT_OID = 25
UNKNOWN_OID = 0
# Materialize's type names (catalog/types.py) → (OID, size in a RowDescription).
OIDS: dict[str, tuple[int, int]] = {
    "boolean": (16, 1),
    "bytea": (17, -1),
    "bigint": (20, 8),
    "smallint": (21, 2),
    "integer": (23, 4),
    "text": (25, -1),
    "real": (700, 4),
    "double precision": (701, 8),
    "uuid": (2950, 16),
    "date": (1082, 4),
    "time": (1083, 8),
    "timestamp": (1114, 8),
    "timestamp with time zone": (1184, 8),
    "interval": (1186, 16),
    "numeric": (1700, -1),
    "jsonb": (3802, -1),
}
# OID → the SQL type name a parameter of that type is cast to.
CASTS = {oid: name for name, (oid, _) in OIDS.items()} | {1043: "text", 19: "text", 1042: "text", 114: "jsonb"}
_EPOCH = datetime.date(2000, 1, 1)
_EPOCH_TIME = datetime.datetime(2000, 1, 1)
_EPOCH_TZ = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


def oid_of(type_name: str | None) -> tuple[int, int]:
    """(OID, size) of a column typed `type_name` (None: untyped, sent as text)."""
    return OIDS.get(type_name or "text", (TEXT_OID, -1))


def text_value(value: Any, oid: int = TEXT_OID) -> bytes | None:
    return None if value is None else pg_text(_typed(value, oid)).encode("utf-8")


def binary_value(value: Any, oid: int) -> bytes | None:
    """`value` in the binary format of type `oid` (PostgreSQL's *send functions)."""
    if value is None:
        return None
    encode = _SENDERS.get(oid)
    return text_value(value) if encode is None else encode(_typed(value, oid))


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_line(values: tuple[Any, ...], oids: list[int]) -> bytes:
    """A row in COPY's text format: tab-separated, NULL as `\\N`, backslash escapes."""
    fields = [
        "\\N" if v is None else pg_text(_typed(v, oid)).translate(_COPY_ESCAPES)
        for v, oid in zip(values, oids, strict=True)
    ]
    return ("\t".join(fields) + "\n").encode("utf-8")


def _typed(value: Any, oid: int) -> Any:
    """A time of day arrives from Spark as a timestamp on today's date."""
    return value.time() if oid == 1083 and isinstance(value, datetime.datetime) else value


def _numeric_send(value: Any) -> bytes:
    """numeric_send: digits in base 10,000 around the decimal point, weight, sign, scale."""
    value = Decimal(pg_text(value))  # Spark's scale, trimmed as the text form is
    if value.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if value.is_infinite():
        return struct.pack("!hhHh", 0, 0, 0xD000 if value > 0 else 0xF000, 0)
    sign, digits, exponent = value.as_tuple()
    scale = max(0, -exponent)
    text = "".join(map(str, digits))
    whole = text[: len(text) + exponent] if exponent < 0 else text + "0" * exponent
    fraction = text[len(text) + exponent :] if exponent < 0 else ""
    whole = whole.lstrip("0")
    whole = "0" * (-len(whole) % 4) + whole
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(whole[i : i + 4]) for i in range(0, len(whole), 4)]
    weight = len(groups) - 1
    groups += [int(fraction[i : i + 4]) for i in range(0, len(fraction), 4)]
    while groups and groups[0] == 0:  # leading zero groups move the weight down
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    header = struct.pack("!hhHh", len(groups), weight, 0x4000 if sign else 0, scale)
    return header + b"".join(struct.pack("!H", g) for g in groups)


def _microseconds(delta: datetime.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp_send(value: datetime.datetime) -> bytes:
    epoch = _EPOCH_TIME if value.tzinfo is None else _EPOCH_TZ
    return struct.pack("!q", _microseconds(value - epoch))


def _time_send(value: datetime.time) -> bytes:
    return struct.pack("!q", ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond)


def _interval_send(value: datetime.timedelta) -> bytes:
    return struct.pack("!qii", _microseconds(value - datetime.timedelta(days=value.days)), value.days, 0)


_SENDERS: dict[int, Callable[[Any], bytes]] = {
    16: lambda v: b"\x01" if v else b"\x00",
    17: bytes,
    20: lambda v: struct.pack("!q", v),
    21: lambda v: struct.pack("!h", v),
    23: lambda v: struct.pack("!i", v),
    700: lambda v: struct.pack("!f", v),
    701: lambda v: struct.pack("!d", v),
    1700: _numeric_send,
    1082: lambda v: struct.pack("!i", (v - _EPOCH).days),
    1083: _time_send,
    1114: _timestamp_send,
    1184: _timestamp_send,
    1186: _interval_send,
    2950: lambda v: uuid.UUID(str(v)).bytes,
    3802: lambda v: b"\x01" + pg_text(v).encode("utf-8"),  # jsonb_send: version 1, then the text
}


def _numeric_recv(data: bytes) -> str:
    count, weight, sign, scale = struct.unpack("!hhHh", data[:8])
    if sign == 0xC000:
        return "NaN"
    groups = struct.unpack(f"!{count}H", data[8 : 8 + 2 * count])
    value = sum(Decimal(g) * Decimal(10_000) ** (weight - i) for i, g in enumerate(groups))
    text = f"{value:.{scale}f}"
    return "-" + text if sign == 0x4000 else text


_RECEIVERS = {
    16: lambda d: "true" if d != b"\x00" else "false",
    20: lambda d: str(struct.unpack("!q", d)[0]),
    21: lambda d: str(struct.unpack("!h", d)[0]),
    23: lambda d: str(struct.unpack("!i", d)[0]),
    700: lambda d: repr(struct.unpack("!f", d)[0]),
    701: lambda d: repr(struct.unpack("!d", d)[0]),
    1700: _numeric_recv,
    1082: lambda d: (_EPOCH + datetime.timedelta(days=struct.unpack("!i", d)[0])).isoformat(),
    1114: lambda d: (_EPOCH_TIME + datetime.timedelta(microseconds=struct.unpack("!q", d)[0])).isoformat(" "),
    1184: lambda d: (_EPOCH_TZ + datetime.timedelta(microseconds=struct.unpack("!q", d)[0])).isoformat(" "),
    2950: lambda d: str(uuid.UUID(bytes=d)),
    3802: lambda d: d[1:].decode("utf-8"),
    114: lambda d: d.decode("utf-8"),
}


def parameter_literal(data: bytes | None, oid: int, binary: bool) -> str:
    """A Bind's parameter value as the SQL literal it stands for: a string literal, cast
    to the parameter's type when the client named one (`$1` of unknown type is a string
    literal, typed by where it is used)."""
    cast = CASTS.get(oid)
    if oid not in (UNKNOWN_OID, *CASTS):
        raise FeatureNotSupported(f"parameters of type oid {oid} are not supported")
    if data is None:
        return "NULL" if cast is None else f"CAST(NULL AS {cast})"
    try:
        if not binary:
            text = data.decode("utf-8")
        elif oid in (17,):
            text = "\\x" + data.hex()
        elif oid in _RECEIVERS:
            text = _RECEIVERS[oid](data)
        elif oid in (UNKNOWN_OID, 25, 1043, 19, 1042):
            text = data.decode("utf-8")
        else:
            raise FeatureNotSupported(f"binary parameters of type {cast} are not supported")
    except (struct.error, UnicodeDecodeError, ValueError, OverflowError) as e:
        raise InvalidParameterValue(f"invalid binary value for a parameter of type {cast or 'unknown'}: {e}") from None
    literal = "'" + text.replace("'", "''") + "'"
    return literal if cast in (None, "text") else f"CAST({literal} AS {cast})"
