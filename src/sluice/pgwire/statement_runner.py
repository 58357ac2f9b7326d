"""What a connection's statements do, whichever protocol (simple or extended) brought them:
a `StatementRunner` runs one statement's text into an `Outcome`.

Each statement goes as in `Session`: parse, plan, apply — planning and applying under the
server's lock, shared by reads (queries, SHOW, EXPLAIN) and exclusive for DDL and writes,
so that what a DDL statement planned is still true when it commits. A statement that runs
Spark jobs runs as a cancellable statement of the session's (`Session.cancellable`), which
a CancelRequest, or the client going away mid-statement, cancels.

The runner answers some statements itself. Transactions are Materialize's: BEGIN starts a
block in which queries run as before (a read transaction); a write in it is refused with
Materialize's `transaction in read-only mode`, DDL with `… cannot be run inside a
transaction block`. Session variables are SET, RESET and SHOWn here. Cursors
(DECLARE/FETCH/CLOSE) live in a block; `COPY (query) TO STDOUT` sends a query's rows, and
a SUBSCRIBE's changes as they arrive until it is cancelled.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice import parse_statement, split_statements
from sluice.errors import (
    ActiveSqlTransaction,
    DuplicateCursor,
    FeatureNotSupported,
    InFailedSqlTransaction,
    NoActiveSqlTransaction,
    QueryCanceled,
    ReadOnlySqlTransaction,
    Span,
    SqlError,
    UndefinedCursor,
)
from sluice.pgwire import protocol as wire
from sluice.pgwire.cursor import Cursor
from sluice.pgwire.settings import Settings
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
    set_statement,
    show_name,
)
from sluice.pgwire.types import TEXT_OID, copy_line, oid_of
from sluice.plan import QueryPlan, SubscribePlan
from sluice.session import Cancellable, Session
from sluice.syntax import ast

# Statements that read: they run beside each other; everything else runs alone.
READS = (ast.Select, ast.ShowObjects, ast.ShowColumns, ast.ShowSourceStatistics, ast.ShowCreate, ast.Explain)
WRITES = (ast.Insert, ast.Update, ast.Delete)
CANCELLED = "canceling statement due to user request"


@dataclass
class Outcome:
    """What a statement returned: its columns' (name, OID, size), if it returns rows."""

    tag: str
    columns: list[tuple[str, int, int]] | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notice: str | None = None
    warning: tuple[str, str] | None = None  # (SQLSTATE, text) of a WARNING
    counted: bool = True  # its tag is `SELECT n` (all but SHOW of a session variable)


class Client(Protocol):
    """What the runner needs of its connection: to send the client messages now (a
    ParameterStatus, COPY data), and the socket whose close cancels what runs."""

    peer: socket.socket

    def send(self, data: bytes) -> None: ...

    def flush(self) -> None: ...


class StatementRunner:
    """Runs the statements of the connection `client` (backend key `pid`) against the
    server's session, and holds what lasts between them: the transaction block, the
    cursors, and what a cancel stops."""

    def __init__(self, server: Any, settings: Settings, pid: int, client: Client) -> None:
        self.server = server
        self.session: Session = server.session
        self.settings = settings
        self.pid = pid
        self.client = client
        self.transaction = "I"  # ReadyForQuery's status: idle, in a block, failed block
        self.read_transaction = False
        self.cursors: dict[str, Cursor] = {}
        self._state = threading.Lock()
        self._cancellable: Cancellable | None = None  # the running statement, if it runs Spark jobs
        self._on_cancel: Callable[[], None] | None = None  # what else a cancel stops
        self._running = False
        self._cancelled = False

    def abort_block(self) -> None:
        """A statement failed: in a transaction block, the block is failed until its end."""
        if self.transaction == "T":
            self.transaction = "E"

    def end_implicit(self) -> None:
        """End the implicit transaction that a statement outside a block runs in (at the
        end of a simple query, and at Sync)."""
        if self.transaction == "I":
            self.read_transaction = False

    def session_statement(self, sql: str) -> bool:
        """Whether the runner answers `sql` itself (transaction control, session variables,
        COPY, cursors, what is not supported) rather than the dialect."""
        words = leading_words(sql)
        return bool(words) and (
            words[0] in TRANSACTION_START | TRANSACTION_END | {"SET", "RESET", "COPY", "DECLARE", "FETCH", "CLOSE"}
            or words[0] in UNSUPPORTED
            or (show_name(sql) is not None and show_name(sql) in self.settings.values or show_name(sql) == "all")
        )

    def run(self, text: str, start: int, end: int) -> Outcome:
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
                self.client.send(wire.parameter_status(shown, self.settings.values[setting[0]]))
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
            outcome = self.run(text, start + query_start, start + query_end)
            if outcome.columns is None:
                raise FeatureNotSupported("COPY of a statement that returns no rows is not supported")
            return self._copy_rows(outcome.columns, outcome.rows, streaming=False)
        with self.server.lock.reading():
            planned = self.session.plan(statement)
        columns = _subscribe_columns(planned)
        cancellable = self.session.cancellable(text[start:end])
        subscription = self._watched(lambda: self.session.subscribe_plan(planned), cancellable)
        return self._watched(
            lambda: self._copy_rows(columns, subscription, streaming=True), cancellable, subscription.close
        )

    def _copy_rows(self, columns: list[tuple[str, int, int]], rows: Any, *, streaming: bool) -> Outcome:
        """Send `rows` as COPY data; `streaming`: each as it comes (a subscription's)."""
        oids = [oid for _, oid, _ in columns]
        self.client.send(wire.copy_out_response(len(columns)))
        self.client.flush()
        count = 0
        for row in rows:
            self.client.send(wire.copy_data(copy_line(row, oids)))
            count += 1
            if streaming:
                self.client.flush()
        self.client.send(wire.COPY_DONE)
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
            columns = _subscribe_columns(planned)
            subscription = self._watched(lambda: self.session.subscribe_plan(planned), None)
            self.cursors[name] = Cursor(columns, subscription=subscription)
        else:
            outcome = self.run(text, start + query_start, start + query_end)
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
            self.close_cursors()
        return Outcome("CLOSE CURSOR")

    def close_cursors(self) -> None:
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
        self.close_cursors()
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

    def columns(self, text: Substituted) -> list[tuple[str, int, int]] | None:
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
        if self.session_statement(sql):
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
                readable, _, _ = select.select([self.client.peer], [], [], 0)
                if readable and self.client.peer.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
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



def _operation(words: list[str]) -> str:
    """What a statement is called in an error: `CREATE SOURCE`, `DROP VIEW`, …"""
    if len(words) > 1 and words[0] in ("CREATE", "DROP", "ALTER", "VALIDATE"):
        return " ".join(words[:2])
    return words[0] if words else "statement"


def _planned_columns(planned: Any) -> list[tuple[str, int, int]] | None:
    if isinstance(planned, QueryPlan):
        return _query_columns(planned)
    columns = getattr(planned, "columns", None)
    if columns:
        return [(c, TEXT_OID, -1) for c in columns]
    return None


def _query_columns(query: QueryPlan) -> list[tuple[str, int, int]]:
    return [(c.name, *oid_of(c.type.name)) for c in query.columns]


def _subscribe_columns(planned: SubscribePlan) -> list[tuple[str, int, int]]:
    """A SUBSCRIBE's columns: its timestamp and diff, then its query's."""
    return [("mz_timestamp", 1700, -1), ("mz_diff", 20, 8), *_query_columns(planned.query)]
