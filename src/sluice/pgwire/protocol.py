"""PostgreSQL's wire protocol 3.0 as bytes: reading a client's messages and writing the
server's (https://www.postgresql.org/docs/current/protocol-message-formats.html).

A client is untrusted input: every read is bounded (a startup packet by PostgreSQL's
10,000 bytes, any other message by `MAX_MESSAGE`), and whatever breaks the framing is a
`ProtocolViolation` with PostgreSQL's text, which ends that connection alone.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

from sluice.errors import ProtocolViolation, SqlError

PROTOCOL_3 = 196608  # 3.0: major 3 in the high 16 bits
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP = 10_000  # PostgreSQL's MAX_STARTUP_PACKET_LENGTH
MAX_MESSAGE = 64 * 1024 * 1024  # a query's text and parameters; PostgreSQL allows 1 GB
# The frontend message types of protocol 3.0 (anything else is a protocol violation).
FRONTEND_TYPES = frozenset(b"QPBDECSHXFdcfp")


class ClientGone(Exception):
    """The client closed its end of the connection."""


class Reader:
    """A connection's incoming bytes, read exactly, message by message."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ClientGone
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def startup(self) -> tuple[int, bytes]:
        """(protocol code, body) of a startup-phase packet."""
        (length,) = struct.unpack("!i", self.exactly(4))
        if not 8 <= length <= MAX_STARTUP:
            raise ProtocolViolation("invalid length of startup packet")
        body = self.exactly(length - 4)
        return struct.unpack("!i", body[:4])[0], body[4:]

    def message(self) -> tuple[int, bytes]:
        """(type byte, body) of a regular message."""
        kind = self.exactly(1)[0]
        if kind not in FRONTEND_TYPES:
            raise ProtocolViolation(f"invalid frontend message type {kind}")
        (length,) = struct.unpack("!i", self.exactly(4))
        if not 4 <= length <= MAX_MESSAGE:
            raise ProtocolViolation("invalid message length")
        return kind, self.exactly(length - 4)


class Body:
    """A message's body read field by field; reading past its end, or leaving bytes
    unread (`end`), is a protocol violation."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ProtocolViolation("invalid message format")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def int16(self) -> int:
        return struct.unpack("!h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack("!i", self._take(4))[0]

    def byte(self) -> int:
        return self._take(1)[0]

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise ProtocolViolation("invalid string in message")
        raw = self.data[self.at : end]
        self.at = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation('invalid byte sequence for encoding "UTF8"') from None

    def value(self) -> bytes | None:
        """A length-prefixed value (-1: NULL)."""
        n = self.int32()
        return None if n == -1 else self._take(n)

    def int16s(self) -> list[int]:
        return [self.int16() for _ in range(self.count())]

    def count(self) -> int:
        n = self.int16()
        if n < 0:
            raise ProtocolViolation("invalid message format")
        return n

    def end(self) -> None:
        if self.at != len(self.data):
            raise ProtocolViolation("invalid message format")


def startup_parameters(body: bytes) -> dict[str, str]:
    """The name/value pairs of a StartupMessage (after its protocol code)."""
    reader = Body(body)
    params: dict[str, str] = {}
    while True:
        name = reader.string()
        if not name:
            break
        params[name] = reader.string()
    reader.end()
    return params


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstring(text: str) -> bytes:
    return text.replace("\0", "").encode("utf-8") + b"\0"


def authentication_ok() -> bytes:
    return message(b"R", struct.pack("!i", 0))


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstring(name) + cstring(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return message(b"K", struct.pack("!ii", pid, secret))


def ready_for_query(status: str) -> bytes:
    return message(b"Z", status.encode())


def negotiate_protocol_version(minor: int, unknown: Iterable[str]) -> bytes:
    options = list(unknown)
    return message(b"v", struct.pack("!ii", minor, len(options)) + b"".join(cstring(o) for o in options))


def row_description(fields: Iterable[tuple[str, int, int, int]]) -> bytes:
    """`fields`: (name, type OID, type size, format code) of each column."""
    fields = list(fields)
    out = [struct.pack("!h", len(fields))]
    for name, oid, size, fmt in fields:
        out.append(cstring(name) + struct.pack("!ihihih", 0, 0, oid, size, -1, fmt))
    return message(b"T", b"".join(out))


def data_row(values: Iterable[bytes | None]) -> bytes:
    values = list(values)
    out = [struct.pack("!h", len(values))]
    for value in values:
        out.append(struct.pack("!i", -1) if value is None else struct.pack("!i", len(value)) + value)
    return message(b"D", b"".join(out))


def parameter_description(oids: Iterable[int]) -> bytes:
    oids = list(oids)
    return message(b"t", struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids))


def copy_out_response(columns: int) -> bytes:
    """CopyOutResponse: text format, every column text."""
    return message(b"H", struct.pack("!bh", 0, columns) + struct.pack("!h", 0) * columns)


def copy_data(data: bytes) -> bytes:
    return message(b"d", data)


COPY_DONE = message(b"c")


def command_complete(tag: str) -> bytes:
    return message(b"C", cstring(tag))


EMPTY_QUERY = message(b"I")
NO_DATA = message(b"n")
PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
PORTAL_SUSPENDED = message(b"s")
SSL_REFUSED = b"N"
SSL_ACCEPTED = b"S"


def error_response(error: SqlError, *, severity: str = "ERROR", position: int | None = None) -> bytes:
    """An ErrorResponse of `error`: severity, SQLSTATE, message, detail, hint and the
    1-based character `position`."""
    fields = [(b"C", error.code), (b"M", error.message)]
    if error.detail:
        fields.append((b"D", error.detail))
    if error.hint:
        fields.append((b"H", error.hint))
    if position is not None:
        fields.append((b"P", str(position)))
    return message(b"E", _fields([(b"S", severity), (b"V", severity), *fields]))


def notice_response(text: str, severity: str = "NOTICE", code: str = "00000") -> bytes:
    return message(b"N", _fields([(b"S", severity), (b"V", severity), (b"C", code), (b"M", text)]))


def _fields(fields: list[tuple[bytes, str]]) -> bytes:
    return b"".join(code + cstring(text) for code, text in fields) + b"\0"
