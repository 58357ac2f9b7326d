"""One client connection: its startup, the simple and extended query protocols, its
transaction state, and cancelling what it runs.

A connection runs on a thread of its own (`server.py` says why). Each statement goes as
in `Session`: parse, plan, apply — planning and applying under the server's lock,
shared by reads (queries, SHOW, EXPLAIN) and exclusive for DDL and writes, so that what a
DDL statement planned is still true when it commits. A statement that runs Spark jobs
runs as a cancellable statement of the session's (`Session.cancellable`), which a
CancelRequest, or the client going away mid-statement, cancels.

Transactions are Materialize's: BEGIN starts a block in which queries run as before (a
read transaction); a write in it is refused with Materialize's `transaction in
read-only mode`, DDL with `… cannot be run inside a transaction block`. Cursors
(DECLARE/FETCH/CLOSE) live in a block; `COPY (query) TO STDOUT` sends a query's rows, and
a SUBSCRIBE's changes as they arrive until it is cancelled.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice import parse_statement, split_statements
from sluice.errors import (
    ActiveSqlTransaction,
    BindMismatch,
    DuplicateCursor,
    DuplicatePreparedStatement,
    FeatureNotSupported,
    InFailedSqlTransaction,
    NoActiveSqlTransaction,
    ParseError,
    ProtocolViolation,
    QueryCanceled,
    ReadOnlySqlTransaction,
    Span,
    SqlError,
    TooManyConnections,
    UndefinedCursor,
    UndefinedPreparedStatement,
    as_sql_error,
)
from sluice.pgwire import protocol as wire
from sluice.pgwire.settings import DEFAULT_DATABASE, Settings
from sluice.pgwire.statements import (
    TRANSACTION_END,
    TRANSACTION_START,
    UNSUPPORTED,
    Substituted,
    catalog_question,
    close_cursor,
    copy_out,
    declare,
    fetch,
    leading_words,
    placeholders,
    set_statement,
    show_name,
    substitute,
)
from sluice.pgwire.types import (
    TEXT_OID,
    binary_value,
    copy_line,
    oid_of,
    parameter_literal,
    text_value,
)
from sluice.plan import QueryPlan, SubscribePlan
from sluice.session import Cancellable, Session
from sluice.syntax import ast

# Statements that read: they run beside each other; everything else runs alone.
READS = (ast.Select, ast.ShowObjects, ast.ShowColumns, ast.ShowSourceStatistics, ast.ShowCreate, ast.Explain)
WRITES = (ast.Insert, ast.Update, ast.Delete)
CANCELLED = "canceling statement due to user request"
STARTUP_SECONDS = 60.0  # PostgreSQL's authentication_timeout: a silent client is let go
_FLUSH_AT = 1 << 16


@dataclass
class Outcome:
    """What a statement returned: its columns' (name, OID, size), if it returns rows."""

    tag: str
    columns: list[tuple[str, int, int]] | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notice: str | None = None
    warning: tuple[str, str] | None = None  # (SQLSTATE, text) of a WARNING
    counted: bool = True  # its tag is `SELECT n` (all but SHOW of a session variable)


class Cursor:
    """A cursor DECLAREd in a transaction block: a query's rows, or a SUBSCRIBE's changes,
    gathered by a thread of its own as they arrive, for FETCH to take."""

    def __init__(self, columns: list[tuple[str, int, int]], rows: list[tuple] | None = None, subscription: Any = None) -> None:
        self.columns = columns
        self.rows = deque(rows or ())
        self.subscription = subscription
        self.changes: queue.Queue = queue.Queue()
        if subscription is not None:
            threading.Thread(target=self._gather, name="sluice-pgwire-cursor", daemon=True).start()

    def _gather(self) -> None:
        try:
            for row in self.subscription:
                self.changes.put(("row", row))
        except SqlError as e:
            self.changes.put(("error", e))
        self.changes.put(("end", None))

    def take(self, count: int | None, timeout: float | None) -> list[tuple]:
        """Up to `count` rows (None: all there are); from a subscription, what arrives
        within `timeout` seconds — without one, waiting for the first."""
        if self.subscription is None:
            n = len(self.rows) if count is None else min(count, len(self.rows))
            return [self.rows.popleft() for _ in range(n)]
        taken: list[tuple] = []
        try:
            item = self.changes.get(timeout=timeout)
            while True:
                kind, value = item
                if kind == "error":
                    raise value
                if kind != "row":  # the end, or a cancel (`interrupt`)
                    self.changes.put(item)
                    return taken
                taken.append(value)
                if count is not None and len(taken) >= count:
                    return taken
                item = self.changes.get_nowait()
        except queue.Empty:
            return taken

    def interrupt(self) -> None:
        self.changes.put(("cancel", None))

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()


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
    def __init__(self, server: Any, sock: socket.socket, pid: int) -> None:
        self.server = server
        self.session: Session = server.session
        self.sock = sock
        self._peer = sock  # where `_watch_peer` looks for the client's close
        self.reader = wire.Reader(sock)
        self.pid = pid
        self.secret = secrets.randbits(31)
        self.settings = Settings()
        self.out = bytearray()
        self.transaction = "I"  # ReadyForQuery's status: idle, in a block, failed block
        self.read_transaction = False
        self.prepared: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, Cursor] = {}
        self.skipping = False  # after an extended-protocol error, until Sync
        self._text: Substituted | None = None  # the statement an error's position is in
        self._state = threading.Lock()
        self._cancellable: Cancellable | None = None  # the running statement, if it runs Spark jobs
        self._on_cancel: Callable[[], None] | None = None  # what else a cancel stops
        self._running = False
        self._cancelled = False

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
            self._close_cursors()
            for sock in {self.sock, self._peer}:
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
            if code == wire.SSL_REQUEST and self.server.tls is not None and self._peer is self.sock:
                self.sock.sendall(wire.SSL_ACCEPTED)
                self.sock = self.server.tls.wrap_socket(self.sock, server_side=True)
                self.reader.sock = self.sock
                # A TLS socket takes no MSG_PEEK: the TCP socket beneath tells of a close.
                self._peer = socket.socket(fileno=os.dup(self.sock.fileno()))
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
        self.send(wire.ready_for_query(self.transaction))
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
            self.send(wire.ready_for_query(self.transaction))
            self.flush()
            return True
        if kind == ord("S"):
            message.end()
            self.skipping = False
            self._end_implicit()
            self.send(wire.ready_for_query(self.transaction))
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
        if self.transaction == "T":
            self.transaction = "E"
        self.send(wire.error_response(error, position=position))

    def _notices(self, outcome: Outcome) -> None:
        if outcome.notice:
            self.send(wire.notice_response(outcome.notice))
        if outcome.warning:
            self.send(wire.notice_response(outcome.warning[1], "WARNING", outcome.warning[0]))

    def _end_implicit(self) -> None:
        if self.transaction == "I":
            self.read_transaction = False

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
                outcome = self._statement(sql, start, end)
            except SqlError as e:
                self._error(e, text)
                break
            self._notices(outcome)
            if outcome.columns is not None:
                self.send(wire.row_description((n, o, s, 0) for n, o, s in outcome.columns))
                for row in outcome.rows:
                    self.send(wire.data_row(text_value(v, c[1]) for v, c in zip(row, outcome.columns, strict=True)))
            self.send(wire.command_complete(_tag(outcome, len(outcome.rows))))
        self._end_implicit()
        self.send(wire.ready_for_query(self.transaction))
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
        if not self._session_statement(sql):  # a syntax error is reported at Parse
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
            self._describe_rows(self._columns(self._text), [])
        elif what == ord("P") and name not in self.portals and name in self.cursors:
            self._describe_rows(self.cursors[name].columns, [])  # a DECLAREd cursor (psycopg's server-side)
        elif what == ord("P"):
            portal = self._portal(name)
            self._text = portal.text
            self._describe_rows(self._columns(portal.text), portal.formats)
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
            portal.outcome = self._statement(portal.text.text, *spans[0])
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

    # ---- statements --------------------------------------------------------------------

    def _session_statement(self, sql: str) -> bool:
        words = leading_words(sql)
        return bool(words) and (
            words[0] in TRANSACTION_START | TRANSACTION_END | {"SET", "RESET", "COPY", "DECLARE", "FETCH", "CLOSE"}
            or words[0] in UNSUPPORTED
            or (show_name(sql) is not None and show_name(sql) in self.settings.values or show_name(sql) == "all")
        )

    def _statement(self, text: str, start: int, end: int) -> Outcome:
        """Run the statement at `text[start:end]`: the connection's own (transactions,
        session variables), or the dialect's, through the session."""
        sql = text[start:end]
        words = leading_words(sql)
        first = words[0] if words else ""
        if first in TRANSACTION_START:
            return self._begin(first)
        if first in TRANSACTION_END:
            return self._finish(first)
        if self.transaction == "E":
            raise InFailedSqlTransaction(
                "current transaction is aborted, commands ignored until end of transaction block"
            )
        if first == "COPY":
            return self._copy(text, start, end)
        if first == "DECLARE":
            return self._declare(text, start, end)
        if first == "FETCH":
            return self._fetch(sql)
        if first == "CLOSE":
            return self._close_cursor(sql)
        if first in UNSUPPORTED:
            raise FeatureNotSupported(f"{UNSUPPORTED[first]} is not supported yet")
        setting = set_statement(sql)
        if setting is not None:
            shown = self.settings.set(*setting)
            if shown is not None:
                self.send(wire.parameter_status(shown, self.settings.values[setting[0]]))
            return Outcome("SET" if setting[1] is not None else "RESET")
        name = show_name(sql)
        if name == "all":
            rows = [(n, v) for n, v in sorted(self.settings.values.items())]
            return Outcome("SHOW", [("name", TEXT_OID, -1), ("setting", TEXT_OID, -1)], rows, counted=False)
        if name is not None and name in self.settings.values:
            column, value = self.settings.show(name)
            return Outcome("SHOW", [(column, TEXT_OID, -1)], [(value,)], counted=False)
        statement = _parsed(text, start, end)
        self._check_transaction(statement, words)
        with self.server.lock.reading() if isinstance(statement, READS) else self.server.lock.writing():
            return self._apply(statement, sql)

    def _copy(self, text: str, start: int, end: int) -> Outcome:
        """`COPY (query) TO STDOUT`: the query's rows in COPY's text format; a SUBSCRIBE's
        changes as they arrive, until the client cancels it or goes away."""
        copied = copy_out(text[start:end])
        if copied is None:
            raise FeatureNotSupported("COPY other than COPY (query) TO STDOUT is not supported yet")
        query_start, query_end, fmt = copied
        if fmt != "text":
            raise FeatureNotSupported(f"COPY in format {fmt} is not supported yet")
        statement = _parsed(text, start + query_start, start + query_end)
        if not isinstance(statement, ast.Subscribe):
            outcome = self._statement(text, start + query_start, start + query_end)
            if outcome.columns is None:
                raise FeatureNotSupported("COPY of a statement that returns no rows is not supported")
            return self._copy_rows(outcome.columns, outcome.rows, streaming=False)
        with self.server.lock.reading():
            planned = self.session.plan(statement)
        query = planned.query
        columns = [("mz_timestamp", 1700, -1), ("mz_diff", 20, 8), *_planned_columns(query)]
        cancellable = self.session.cancellable(text[start:end])
        subscription = self._watched(lambda: self.session.subscribe_plan(planned), cancellable)
        return self._watched(
            lambda: self._copy_rows(columns, subscription, streaming=True), cancellable, subscription.close
        )

    def _copy_rows(self, columns: list[tuple[str, int, int]], rows: Any, *, streaming: bool) -> Outcome:
        """Send `rows` as COPY data; `streaming`: each as it comes (a subscription's)."""
        oids = [oid for _, oid, _ in columns]
        self.send(wire.copy_out_response(len(columns)))
        self.flush()
        count = 0
        for row in rows:
            self.send(wire.copy_data(copy_line(row, oids)))
            count += 1
            if streaming:
                self.flush()
        self.send(wire.COPY_DONE)
        return Outcome(f"COPY {count}")

    def _declare(self, text: str, start: int, end: int) -> Outcome:
        found = declare(text[start:end])
        if found is None:
            raise FeatureNotSupported("this form of DECLARE is not supported yet")
        name, options, query_start, query_end = found
        if self.transaction == "I":
            raise NoActiveSqlTransaction("DECLARE CURSOR can only be used in transaction blocks")
        unsupported = set(options.split()) - {"NO", "SCROLL", "INSENSITIVE", "ASENSITIVE"}
        if unsupported or options.split().count("SCROLL") > options.split().count("NO"):
            raise FeatureNotSupported(f"DECLARE {options} CURSOR is not supported yet")
        if name in self.cursors:
            raise DuplicateCursor(f'cursor "{name}" already exists')
        statement = _parsed(text, start + query_start, start + query_end)
        if isinstance(statement, ast.Subscribe):
            self.read_transaction = True
            with self.server.lock.reading():
                planned = self.session.plan(statement)
            columns = [("mz_timestamp", 1700, -1), ("mz_diff", 20, 8), *_planned_columns(planned.query)]
            subscription = self._watched(lambda: self.session.subscribe_plan(planned), None)
            self.cursors[name] = Cursor(columns, subscription=subscription)
        else:
            outcome = self._statement(text, start + query_start, start + query_end)
            if outcome.columns is None:
                raise FeatureNotSupported("DECLARE of a statement that returns no rows is not supported")
            self.cursors[name] = Cursor(outcome.columns, outcome.rows)
        return Outcome("DECLARE CURSOR")

    def _cursor(self, name: str) -> Cursor:
        cursor = self.cursors.get(name)
        if cursor is None:
            raise UndefinedCursor(f'cursor "{name}" does not exist')
        return cursor

    def _fetch(self, sql: str) -> Outcome:
        found = fetch(sql)
        if found is None:
            raise FeatureNotSupported("this form of FETCH is not supported yet")
        name, count, timeout = found
        cursor = self._cursor(name)
        rows = self._watched(lambda: cursor.take(count, timeout), None, cursor.interrupt)
        return Outcome(f"FETCH {len(rows)}", cursor.columns, rows, counted=False)

    def _close_cursor(self, sql: str) -> Outcome:
        name = close_cursor(sql)
        if name is None:
            raise FeatureNotSupported("this form of CLOSE is not supported yet")
        if name:
            self._cursor(name).close()
            del self.cursors[name]
        else:
            self._close_cursors()
        return Outcome("CLOSE CURSOR")

    def _close_cursors(self) -> None:
        for cursor in self.cursors.values():
            cursor.close()
        self.cursors.clear()

    def _begin(self, word: str) -> Outcome:
        if self.transaction != "I":
            return Outcome("BEGIN", warning=("25001", "there is already a transaction in progress"))
        self.transaction = "T"
        self.read_transaction = False
        return Outcome("BEGIN" if word == "BEGIN" else "START TRANSACTION")

    def _finish(self, word: str) -> Outcome:
        failed = self.transaction == "E"
        outside = self.transaction == "I"
        self.transaction = "I"
        self.read_transaction = False
        self._close_cursors()
        tag = "COMMIT" if word in ("COMMIT", "END") and not failed else "ROLLBACK"
        warning = ("25P01", "there is no transaction in progress") if outside else None
        return Outcome(tag, warning=warning)

    def _check_transaction(self, statement: ast.Statement, words: list[str]) -> None:
        if self.transaction != "T":
            return
        if isinstance(statement, READS):
            self.read_transaction = True
        elif isinstance(statement, WRITES):
            if self.read_transaction:
                raise ReadOnlySqlTransaction("transaction in read-only mode")
            raise FeatureNotSupported(f"{words[0]} inside a transaction block is not supported yet")
        else:
            raise ActiveSqlTransaction(f"{_operation(words)} cannot be run inside a transaction block")

    def _columns(self, text: Substituted) -> list[tuple[str, int, int]] | None:
        """The columns the statement at `text` returns (planned, not run); None when it
        returns no rows."""
        spans = list(split_statements(text.text))
        if not spans:
            return None
        sql = text.text[spans[0][0] : spans[0][1]]
        name = show_name(sql)
        if name == "all":
            return [("name", TEXT_OID, -1), ("setting", TEXT_OID, -1)]
        if name is not None and name in self.settings.values:
            return [(name, TEXT_OID, -1)]
        fetched = fetch(sql) if leading_words(sql)[:1] == ["FETCH"] else None
        if fetched is not None:
            return self._cursor(fetched[0]).columns
        if self._session_statement(sql):
            return None
        statement = _parsed(text.text, *spans[0])
        if not isinstance(statement, READS):
            return None
        with self.server.lock.reading():
            planned = self.session.plan(statement)
        return _planned_columns(planned)

    def _apply(self, statement: ast.Statement, sql: str) -> Outcome:
        planned = self.session.plan(statement)
        if isinstance(planned, SubscribePlan):
            raise FeatureNotSupported("SUBSCRIBE over the wire is not supported yet", span=statement.span)
        cancellable = self.session.cancellable(sql) if Session.needs_spark(planned) else None
        result = self._watched(lambda: self.session.apply(planned, statement), cancellable)
        columns = _planned_columns(planned)
        if columns is None and result.columns:
            columns = [(c, TEXT_OID, -1) for c in result.columns]
        return Outcome(result.status, columns, result.rows, result.notice)

    def _watched(
        self, work: Callable[[], Any], statement: Cancellable | None, on_cancel: Callable[[], None] | None = None
    ) -> Any:
        """`work()`, cancelled (as `statement`, its Spark jobs, and by `on_cancel()`) by a
        CancelRequest or by the client going away meanwhile; Spark starts first for a
        `statement`."""
        with self._state:
            self._cancellable, self._running, self._cancelled = statement, True, False
            self._on_cancel = on_cancel
        done = threading.Event()
        watcher = threading.Thread(target=self._watch_peer, args=(done,), name=f"sluice-pgwire-{self.pid}", daemon=True)
        watcher.start()
        try:
            if statement is None:
                result = work()
            else:
                with self.session.running(statement, start_spark=True):
                    result = work()
        except SqlError:
            if self._cancelled:
                raise QueryCanceled(CANCELLED) from None
            raise
        finally:
            done.set()
            with self._state:
                self._cancellable, self._running, self._on_cancel = None, False, None
        if self._cancelled and on_cancel is not None:  # what it streamed ended by the cancel
            raise QueryCanceled(CANCELLED)
        return result

    def _watch_peer(self, done: threading.Event) -> None:
        """Cancel the running statement if the client closes its end meanwhile."""
        while not done.wait(0.2):
            try:
                readable, _, _ = select.select([self._peer], [], [], 0)
                if readable and self._peer.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    self.cancel()
                    return
            except BlockingIOError:
                continue
            except (OSError, ValueError):  # the socket is gone too
                self.cancel()
                return

    def cancel(self) -> None:
        """Cancel the running statement: what it streams (`on_cancel`), and its Spark jobs
        as long as it runs (`Session.cancel`)."""
        with self._state:
            if not self._running:
                return
            self._cancelled = True
            statement, on_cancel = self._cancellable, self._on_cancel
        if on_cancel is not None:
            on_cancel()
        if statement is not None:
            self.session.cancel(statement)


def _parsed(text: str, start: int, end: int) -> ast.Statement:
    """The statement at `text[start:end]`, unless it asks what sluice cannot answer yet."""
    asked = catalog_question(text[start:end])
    if asked is not None:
        what, offset = asked
        raise FeatureNotSupported(f"{what} is not supported yet", span=Span(start + offset, start + offset))
    return parse_statement(text, start, end)


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


def _operation(words: list[str]) -> str:
    """What a statement is called in an error: `CREATE SOURCE`, `DROP VIEW`, …"""
    if len(words) > 1 and words[0] in ("CREATE", "DROP", "ALTER", "VALIDATE"):
        return " ".join(words[:2])
    return words[0] if words else "statement"


def _planned_columns(planned: Any) -> list[tuple[str, int, int]] | None:
    if isinstance(planned, QueryPlan):
        return [(c.name, *oid_of(c.type.name)) for c in planned.columns]
    columns = getattr(planned, "columns", None)
    if columns:
        return [(c, TEXT_OID, -1) for c in columns]
    return None


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

