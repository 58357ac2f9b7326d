"""One client connection: its startup (TLS, the startup parameters, the greeting), the
simple and extended query protocols (prepared statements and portals), and how errors and
notices reach the client.

A connection runs on a thread of its own (`server.py` says why). What its statements do —
the transaction block, session variables, cursors, COPY, the dialect's statements through
the session, and cancelling them — is its `StatementRunner`'s (`statement_runner.py`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from sluice import parse_statement, split_statements
from sluice.errors import (
    BindMismatch,
    DuplicateCursor,
    DuplicatePreparedStatement,
    FeatureNotSupported,
    ParseError,
    ProtocolViolation,
    SqlError,
    TooManyConnections,
    UndefinedCursor,
    UndefinedPreparedStatement,
    as_sql_error,
)
from sluice.pgwire import protocol as wire
from sluice.pgwire.settings import DEFAULT_DATABASE, Settings
from sluice.pgwire.statement_runner import Outcome, StatementRunner
from sluice.pgwire.statements import Substituted, placeholders, substitute
from sluice.pgwire.types import TEXT_OID, binary_value, parameter_literal, text_value

STARTUP_SECONDS = 60.0  # PostgreSQL's authentication_timeout: a silent client is let go
_FLUSH_AT = 1 << 16


@dataclass
class Prepared:
    sql: str
    types: list[int]  # each parameter's type OID (0: unknown)


@dataclass
class Portal:
    statement: Prepared
    text: Substituted
    formats: list[int]
    outcome: Outcome | None = None
    sent: int = 0


class Connection:
    """One client's conversation, from its startup packet to its Terminate (or its going away)."""

    def __init__(self, server: Any, sock: socket.socket, pid: int) -> None:
        self.server = server
        self.sock = sock
        self.peer = sock  # where a close of the client's end shows (see `_startup`)
        self.reader = wire.Reader(sock)
        self.pid = pid
        self.secret = secrets.randbits(31)
        self.settings = Settings()
        self.out = bytearray()
        self.runner = StatementRunner(server, self.settings, pid, self)
        self.prepared: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.skipping = False  # after an extended-protocol error, until Sync
        self._text: Substituted | None = None  # the statement an error's position is in

    # ---- the connection's life -------------------------------------------------------

    def run(self) -> None:
        registered = False
        try:
            self.sock.settimeout(STARTUP_SECONDS)
            params = self._startup()
            if params is None:
                return
            self.sock.settimeout(None)
            registered = self.server.register(self)
            if not registered:
                limit, current = self.server.max_connections, self.server.count()
                raise TooManyConnections(
                    f"creating connection would violate max_connections limit"
                    f" (desired: {current + 1}, limit: {limit}, current: {current})"
                )
            self._greet(params)
            while True:
                kind, body = self.reader.message()
                if not self._message(kind, body):
                    return
        except (wire.ClientGone, OSError):
            return
        except SqlError as e:  # a broken protocol or a refusal: FATAL, and the connection ends
            self._fatal(e)
        except Exception as e:  # noqa: BLE001 - whatever it was ends this connection alone
            self._fatal(as_sql_error(e))
        finally:
            if registered:
                self.server.unregister(self)
            self.cancel()
            self.runner.close_cursors()
            for sock in {self.sock, self.peer}:
                with contextlib.suppress(OSError):
                    sock.close()

    def _fatal(self, error: SqlError) -> None:
        try:
            self.send(wire.error_response(error, severity="FATAL"))
            self.flush()
        except OSError:
            pass

    def _startup(self) -> dict[str, str] | None:
        """The client's startup parameters, after answering an SSLRequest (with TLS when
        the server has it) and refusing GSS encryption; None when the packet was a
        CancelRequest (handled, and, as in PostgreSQL, not answered)."""
        while True:
            code, body = self.reader.startup()
            if code == wire.SSL_REQUEST and self.server.tls is not None and self.peer is self.sock:
                self.sock.sendall(wire.SSL_ACCEPTED)
                self.sock = self.server.tls.wrap_socket(self.sock, server_side=True)
                self.reader.sock = self.sock
                # A TLS socket takes no MSG_PEEK: the TCP socket beneath tells of a close.
                self.peer = socket.socket(fileno=os.dup(self.sock.fileno()))
                continue
            if code in (wire.SSL_REQUEST, wire.GSSENC_REQUEST):
                self.sock.sendall(wire.SSL_REFUSED)
                continue
            if code == wire.CANCEL_REQUEST:
                if len(body) != 8:
                    raise ProtocolViolation("invalid length of startup packet")
                self.server.cancel(int.from_bytes(body[:4], "big"), int.from_bytes(body[4:], "big"))
                return None
            if code >> 16 != 3:
                raise FeatureNotSupported(
                    f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0 to 3.0"
                )
            params = wire.startup_parameters(body)
            if code & 0xFFFF or any(k.startswith("_pq_.") for k in params):
                self.send(wire.negotiate_protocol_version(0, [k for k in params if k.startswith("_pq_.")]))
            return {k: v for k, v in params.items() if not k.startswith("_pq_.")}

    def _greet(self, params: dict[str, str]) -> None:
        notices = []
        settings = dict(params)
        settings.pop("user", None)
        database = settings.pop("database", DEFAULT_DATABASE)
        for name, value in _options(settings.pop("options", "")) + list(settings.items()) + [("database", database)]:
            try:
                self.settings.set(name, value)
            except SqlError as e:
                notices.append(f"startup setting {name} not set: {e.message}")
        if database != DEFAULT_DATABASE:
            self.settings.values["database"] = database
            notices.append(f'session database "{database}" does not exist')
        self.send(wire.authentication_ok())
        for name, value in self.settings.notified():
            self.send(wire.parameter_status(name, value))
        self.send(wire.backend_key_data(self.pid, self.secret))
        for notice in notices:
            self.send(wire.notice_response(notice))
        self.send(wire.ready_for_query(self.runner.transaction))
        self.flush()

    def send(self, data: bytes) -> None:
        self.out += data
        if len(self.out) >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        if self.out:
            data, self.out = bytes(self.out), bytearray()
            self.sock.sendall(data)

    # ---- messages ----------------------------------------------------------------------

    def _message(self, kind: int, body: bytes) -> bool:
        """Handle one message; False when the client ends the connection."""
        message = wire.Body(body)
        if kind == ord("X"):
            return False
        if kind in b"dcf":  # COPY data outside a COPY: PostgreSQL ignores it too
            return True
        if kind == ord("p"):
            raise ProtocolViolation("unexpected password message")
        if kind == ord("Q"):
            sql = message.string()
            message.end()
            self._simple_query(sql)
            return True
        if kind == ord("F"):
            self._error(FeatureNotSupported("function call messages are not supported"))
            self.send(wire.ready_for_query(self.runner.transaction))
            self.flush()
            return True
        if kind == ord("S"):
            message.end()
            self.skipping = False
            self.runner.end_implicit()
            self.send(wire.ready_for_query(self.runner.transaction))
            self.flush()
            return True
        if kind == ord("H"):
            message.end()
            self.flush()
            return True
        if self.skipping:
            return True
        try:
            {
                ord("P"): self._parse,
                ord("B"): self._bind,
                ord("D"): self._describe,
                ord("E"): self._execute,
                ord("C"): self._close,
            }[kind](message)
        except ProtocolViolation:
            raise
        except SqlError as e:
            self._error(e, self._text)
            self.skipping = True
        finally:
            self._text = None
        return True

    def _error(self, error: SqlError, text: Substituted | None = None) -> None:
        position = None
        if text is not None and error.span is not None:
            position = text.original(error.span.start) + 1
        self.runner.abort_block()
        self.send(wire.error_response(error, position=position))

    def _notices(self, outcome: Outcome) -> None:
        if outcome.notice:
            self.send(wire.notice_response(outcome.notice))
        if outcome.warning:
            self.send(wire.notice_response(outcome.warning[1], "WARNING", outcome.warning[0]))

    # ---- the simple query protocol -----------------------------------------------------

    def _simple_query(self, sql: str) -> None:
        self.portals.pop("", None)
        self.prepared.pop("", None)
        text = Substituted(sql)
        spans = list(split_statements(sql))
        if not spans:
            self.send(wire.EMPTY_QUERY)
        for start, end in spans:
            try:
                outcome = self.runner.run(sql, start, end)
            except SqlError as e:
                self._error(e, text)
                break
            self._notices(outcome)
            if outcome.columns is not None:
                self.send(wire.row_description((n, o, s, 0) for n, o, s in outcome.columns))
                for row in outcome.rows:
                    self.send(wire.data_row(text_value(v, c[1]) for v, c in zip(row, outcome.columns, strict=True)))
            self.send(wire.command_complete(_tag(outcome, len(outcome.rows))))
        self.runner.end_implicit()
        self.send(wire.ready_for_query(self.runner.transaction))
        self.flush()

    # ---- the extended query protocol ---------------------------------------------------

    def _parse(self, message: wire.Body) -> None:
        name, sql = message.string(), message.string()
        types = [message.int32() for _ in range(message.count())]
        message.end()
        if name and name in self.prepared:
            raise DuplicatePreparedStatement(f'prepared statement "{name}" already exists')
        if len(list(split_statements(sql))) > 1:
            raise ParseError("cannot insert multiple commands into a prepared statement")
        found = placeholders(sql)
        count = max(len(types), len(found))
        types = [(types[i] if i < len(types) else 0) or (found[i] if i < len(found) else 0) for i in range(count)]
        if not self.runner.session_statement(sql):  # a syntax error is reported at Parse
            self._text = substitute(sql, [parameter_literal(None, t, False) for t in types])
            for start, end in split_statements(self._text.text):
                parse_statement(self._text.text, start, end)
        self.prepared[name] = Prepared(sql, types)
        self.send(wire.PARSE_COMPLETE)

    def _bind(self, message: wire.Body) -> None:
        portal, name = message.string(), message.string()
        formats = message.int16s()
        values = [message.value() for _ in range(message.count())]
        results = message.int16s()
        message.end()
        prepared = self.prepared.get(name)
        if prepared is None:
            raise UndefinedPreparedStatement(f'prepared statement "{name}" does not exist')
        if len(values) != len(prepared.types):
            raise BindMismatch(
                f'bind message supplies {len(values)} parameters, but prepared statement "{name}"'
                f" requires {len(prepared.types)}"
            )
        if len(formats) not in (0, 1, len(values)):
            raise BindMismatch(f"bind message has {len(formats)} parameter formats but {len(values)} parameters")
        binary = [bool((formats or [0])[0 if len(formats) <= 1 else i]) for i in range(len(values))]
        literals = [parameter_literal(v, t, b) for v, t, b in zip(values, prepared.types, binary, strict=True)]
        if portal and portal in self.portals:
            raise DuplicateCursor(f'portal "{portal}" already exists')
        self.portals[portal] = Portal(prepared, substitute(prepared.sql, literals), results)
        self.send(wire.BIND_COMPLETE)

    def _describe(self, message: wire.Body) -> None:
        what, name = message.byte(), message.string()
        message.end()
        if what == ord("S"):
            prepared = self.prepared.get(name)
            if prepared is None:
                raise UndefinedPreparedStatement(f'prepared statement "{name}" does not exist')
            self.send(wire.parameter_description(t or TEXT_OID for t in prepared.types))
            nulls = [parameter_literal(None, t, False) for t in prepared.types]
            self._text = substitute(prepared.sql, nulls)
            self._describe_rows(self.runner.columns(self._text), [])
        elif what == ord("P") and name not in self.portals and name in self.runner.cursors:
            self._describe_rows(self.runner.cursors[name].columns, [])  # a DECLAREd cursor (psycopg's server-side)
        elif what == ord("P"):
            portal = self._portal(name)
            self._text = portal.text
            self._describe_rows(self.runner.columns(portal.text), portal.formats)
        else:
            raise ProtocolViolation(f"invalid DESCRIBE message subtype {what}")

    def _describe_rows(self, columns: list[tuple[str, int, int]] | None, formats: list[int]) -> None:
        if columns is None:
            self.send(wire.NO_DATA)
        else:
            self.send(wire.row_description((n, o, s, _format(formats, i)) for i, (n, o, s) in enumerate(columns)))

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise UndefinedCursor(f'portal "{name}" does not exist')
        return portal

    def _execute(self, message: wire.Body) -> None:
        name, limit = message.string(), message.int32()
        message.end()
        portal = self._portal(name)
        if portal.outcome is None:
            spans = list(split_statements(portal.text.text))
            if not spans:
                self.send(wire.EMPTY_QUERY)
                return
            self._text = portal.text
            portal.outcome = self.runner.run(portal.text.text, *spans[0])
        outcome = portal.outcome
        if portal.sent == 0:
            self._notices(outcome)
        rows = outcome.rows[portal.sent :] if limit <= 0 else outcome.rows[portal.sent : portal.sent + limit]
        columns = outcome.columns or []
        for row in rows:
            self.send(wire.data_row(_encode(v, columns[i][1], _format(portal.formats, i)) for i, v in enumerate(row)))
        portal.sent += len(rows)
        if outcome.columns is not None and portal.sent < len(outcome.rows):
            self.send(wire.PORTAL_SUSPENDED)
        else:
            self.send(wire.command_complete(_tag(outcome, len(rows))))

    def _close(self, message: wire.Body) -> None:
        what, name = message.byte(), message.string()
        message.end()
        if what == ord("S"):
            self.prepared.pop(name, None)
        elif what == ord("P"):
            self.portals.pop(name, None)
        else:
            raise ProtocolViolation(f"invalid CLOSE message subtype {what}")
        self.send(wire.CLOSE_COMPLETE)

    def cancel(self) -> None:
        """Cancel the statement running, if any (a CancelRequest, the server stopping)."""
        self.runner.cancel()


def _options(text: str) -> list[tuple[str, str]]:
    """The settings of the startup `options` parameter: `-c name=value`, `--name=value`
    (PostgreSQL's pg_split_opts: blanks separate, a backslash escapes one)."""
    words, word, escaped = [], "", False
    for ch in text:
        if escaped:
            word, escaped = word + ch, False
        elif ch == "\\":
            escaped = True
        elif ch.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += ch
    if word:
        words.append(word)
    settings, expecting = [], False
    for word in words:
        if word == "-c":
            expecting = True
            continue
        body = word if expecting else word[2:] if word.startswith(("-c", "--")) else None
        expecting = False
        if body is not None and "=" in body:
            name, value = body.split("=", 1)
            settings.append((name.replace("-", "_"), value))
    return settings


def _format(formats: list[int], i: int) -> int:
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else formats[i] if i < len(formats) else 0


def _encode(value: Any, oid: int, fmt: int) -> bytes | None:
    return binary_value(value, oid) if fmt == 1 else text_value(value, oid)


def _tag(outcome: Outcome, count: int) -> str:
    """CommandComplete's tag: `SELECT n` for whatever returned rows, as Materialize writes
    it (SHOW and EXPLAIN too); otherwise the statement's status."""
    if outcome.columns is not None and outcome.counted:
        return f"SELECT {count}"
    return outcome.tag

