"""A Kafka broker's front door that demands SASL/PLAIN, for tests: it speaks the real wire
protocol (ApiVersions, SaslHandshake, SaslAuthenticate) to a real librdkafka client, and
records every username and password the client presents.

The embedded mock cluster does not do SASL, so this is how a test sees what credentials
sluice's Kafka clients really send. It serves no data: after authenticating (or refusing)
a client, it closes the connection.
"""

from __future__ import annotations

import socket
import struct
import threading

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_VERSION, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 35, 33, 58
# (api key, min version, max version) this door answers.
_SUPPORTED = ((API_VERSIONS, 0, 3), (SASL_HANDSHAKE, 0, 1), (SASL_AUTHENTICATE, 0, 1))


class SaslBroker:
    def __init__(self, username: str, password: str) -> None:
        self.expected = (username, password)
        self.presented: list[tuple[str, str]] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.bootstrap = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> SaslBroker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(connection,), daemon=True).start()

    def _talk(self, connection: socket.socket) -> None:
        with connection:
            try:
                while self._answer(connection):
                    pass
            except (OSError, struct.error, EOFError):
                pass

    def _answer(self, connection: socket.socket) -> bool:
        """Answer one request; False once the conversation is over."""
        (size,) = struct.unpack(">i", _read(connection, 4))
        request = _read(connection, size)
        api_key, version, correlation, client_id_length = struct.unpack(">hhih", request[:10])
        body = request[10 + max(client_id_length, 0) :]
        if api_key == API_VERSIONS:
            _send(connection, correlation, _api_versions(version))
            return True
        if api_key == SASL_HANDSHAKE:
            (length,) = struct.unpack(">h", body[:2])
            mechanism = body[2 : 2 + length].decode()
            error = 0 if mechanism == "PLAIN" else UNSUPPORTED_SASL_MECHANISM
            _send(connection, correlation, struct.pack(">hi", error, 1) + _string("PLAIN"))
            return error == 0
        if api_key == SASL_AUTHENTICATE:
            (length,) = struct.unpack(">i", body[:4])
            _, username, password = body[4 : 4 + length].split(b"\0")
            presented = (username.decode(), password.decode())
            self.presented.append(presented)
            if presented == self.expected:
                answer = struct.pack(">hh", 0, -1)
            else:
                answer = struct.pack(">h", SASL_AUTHENTICATION_FAILED) + _string("Invalid username or password")
            answer += struct.pack(">i", 0) + (struct.pack(">q", 0) if version >= 1 else b"")
            _send(connection, correlation, answer)
        return False


def _api_versions(version: int) -> bytes:
    if version > 3:  # the client retries with a version from this (v0-shaped) answer
        return struct.pack(">hi", UNSUPPORTED_VERSION, 1) + struct.pack(">hhh", API_VERSIONS, 0, 3)
    if version == 3:  # flexible: compact array, tagged fields
        entries = b"".join(struct.pack(">hhhB", *api, 0) for api in _SUPPORTED)
        return struct.pack(">hB", 0, len(_SUPPORTED) + 1) + entries + struct.pack(">iB", 0, 0)
    entries = b"".join(struct.pack(">hhh", *api) for api in _SUPPORTED)
    throttle = struct.pack(">i", 0) if version >= 1 else b""
    return struct.pack(">hi", 0, len(_SUPPORTED)) + entries + throttle


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _send(connection: socket.socket, correlation: int, body: bytes) -> None:
    message = struct.pack(">i", correlation) + body
    connection.sendall(struct.pack(">i", len(message)) + message)


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data
