"""The listener behind `sluice serve`: one `Session` serving many PostgreSQL connections.

A connection is a thread: a statement is a blocking call into the session (planning, a
Spark job through py4j, a Kafka read), so an asyncio loop would hand every statement to
a thread anyway, and a statement's Spark jobs — what a cancel cancels — are those of the
thread that runs it (`Session.running`). An idle connection is a thread blocked in `recv`: no CPU, and
memory for its stack alone.

The server owns what connections share: the session's lock (`ReadWriteLock`: reads run
beside each other, DDL and writes alone), the table of connections by backend key (a
CancelRequest arrives on a connection of its own and names another), and the limit on
their number.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
import ssl
import threading
from collections.abc import Iterator

from sluice.pgwire.connection import Connection
from sluice.session import Session

DEFAULT_PORT = 6875  # Materialize's
DEFAULT_MAX_CONNECTIONS = 100


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back, so a stream
    of queries cannot keep a DDL statement waiting forever."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._writing and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._changed:
                self._readers -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with self._changed:
            self._writers_waiting += 1
            self._changed.wait_for(lambda: not self._writing and not self._readers)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._changed:
                self._writing = False
                self._changed.notify_all()


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server's TLS context from a certificate chain and its private key (PEM files)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class Server:
    def __init__(
        self,
        session: Session,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.session = session
        self.tls = tls  # when given, an SSLRequest is accepted and the connection encrypted
        self.max_connections = max_connections
        self.lock = ReadWriteLock()
        self._connections: dict[int, Connection] = {}
        self._threads: set[threading.Thread] = set()
        self._table = threading.Lock()
        self._pids = itertools.count(1)
        self._stop = threading.Event()
        self._listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        self.address = self._listener.getsockname()[:2]

    def register(self, connection: Connection) -> bool:
        """Count `connection` in, unless that passes the limit."""
        with self._table:
            if len(self._connections) >= self.max_connections:
                return False
            self._connections[connection.pid] = connection
            return True

    def unregister(self, connection: Connection) -> None:
        with self._table:
            self._connections.pop(connection.pid, None)

    def count(self) -> int:
        with self._table:
            return len(self._connections)

    def cancel(self, pid: int, secret: int) -> None:
        """A CancelRequest: cancel what the connection with this backend key runs (a
        wrong key cancels nothing, and, as in PostgreSQL, is not answered)."""
        with self._table:
            connection = self._connections.get(pid)
        if connection is not None and connection.secret == secret:
            connection.cancel()

    def serve(self) -> None:
        """Accept connections until `stop`."""
        with self._listener:
            while not self._stop.is_set():
                readable, _, _ = select.select([self._listener], [], [], 0.2)
                if not readable:
                    continue
                try:
                    sock, _ = self._listener.accept()
                except OSError:
                    continue
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection = Connection(self, sock, next(self._pids))
                thread = threading.Thread(target=self._run, args=(connection,), name=f"sluice-pgwire-{connection.pid}", daemon=True)
                with self._table:
                    self._threads.add(thread)
                thread.start()

    def _run(self, connection: Connection) -> None:
        try:
            connection.run()
        finally:
            with self._table:
                self._threads.discard(threading.current_thread())

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, end every connection (cancelling what it runs), and wait up to
        `timeout` seconds for their threads."""
        self._stop.set()
        with self._table:
            connections = list(self._connections.values())
            threads = list(self._threads)
        for connection in connections:
            connection.cancel()
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout)
