"""A TCP forwarding listener: what lets the embedded broker listen on a port of the user's
choosing.

librdkafka's mock cluster always listens on an ephemeral port, and
`rd_kafka_mock_broker_set_host_port` changes only the address a broker advertises in its
metadata. `Forwarder` listens on the chosen port and relays each connection, byte for
byte, to the broker's own listener; with the broker advertising the chosen port, clients
only ever connect to it. It knows nothing of the Kafka protocol.
"""

from __future__ import annotations

import os
import socket
import threading

from sluice.errors import ExternalSystemError

_CHUNK = 256 * 1024


class Forwarder:
    """Listens on `host:port` and relays every connection to `target` (host, port), each
    direction in a thread of its own, until `close()`."""

    def __init__(self, host: str, port: int, target: tuple[str, int]) -> None:
        self.target = target
        try:
            self._server = socket.create_server((host, port))
        except OSError as e:
            reason = (os.strerror(e.errno) if e.errno else str(e)).lower()
            raise ExternalSystemError(f"cannot listen on {host}:{port}: {reason}") from None
        self.address = f"{host}:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, name=f"sluice-forward-{port}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # the listener was closed
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the broker is gone: the client sees its connection drop
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(source, sink), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        buffer = memoryview(bytearray(_CHUNK))
        try:
            while True:
                size = source.recv_into(buffer)
                if not size:
                    break
                sink.sendall(buffer[:size])
        except OSError:  # either side went away
            pass
        finally:
            # The other direction's thread sees the shutdown and ends too.
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                for sock in (source, sink):
                    if sock in self._open:
                        self._open.discard(sock)
                        sock.close()

    def close(self) -> None:
        """Stop listening and drop every relayed connection."""
        with self._lock:
            self._closed = True
            sockets, self._open = list(self._open), set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        except OSError:
            pass
        self._server.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
