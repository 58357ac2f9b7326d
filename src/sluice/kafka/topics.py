"""Topics on any broker: listing them, and creating them even where the Kafka protocol
cannot.

A real broker creates topics through the admin API (CreateTopics). The embedded broker
cannot (librdkafka's mock answers "Topic Admin API (KIP-4) not supported" after a
timeout), so `sluice kafka serve` opens a control socket beside its address: a Unix
socket at `control_path(address)`, in the temporary directory, that takes one JSON
request a connection, `{"create_topic": NAME, "partitions": N}`, and answers `{"ok":
true}` or `{"error": TEXT}`. A Unix socket because it is found from the broker's address
alone, is only reachable on this machine, is guarded by file permissions, and needs no
second port; `create_topic` uses it when the address has one, the admin API otherwise.
An embedded broker of the calling process itself (a test's, `sluice run --embedded`'s) is
asked directly.

A topic's configuration (`cleanup.policy`, retention) is given to CreateTopics on a real
broker and read back with DescribeConfigs (`topic_config`). The embedded broker keeps no
topic configuration at all (its DescribeConfigs is not answered and its topics are made
without one): there `create_topic` takes none and `topic_config` answers None —
`is_embedded` tells a caller which it talks to.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

from sluice.errors import ExternalSystemError
from sluice.kafka.client import KafkaReadError, consumer, kafka_reason

TIMEOUT_SECONDS = 10.0
_REQUEST_LIMIT = 64 * 1024
_LOOPBACK = ("localhost", "::1")


def control_path(address: str) -> Path | None:
    """Where the control socket of a broker serving `address` (host:port, the first of a
    list) on this machine lives; None for an address that is not a loopback one."""
    host, _, port = address.split(",")[0].strip().rpartition(":")
    if not port.isdigit() or host.strip("[]") not in _LOOPBACK and not host.startswith("127."):
        return None
    return Path(tempfile.gettempdir()) / f"sluice-kafka-{port}.sock"


class ControlServer:
    """The control socket of an embedded broker (`create_topic(name, partitions)` is
    called for each request), until `close()`."""

    def __init__(self, address: str, create_topic: Any) -> None:
        path = control_path(address)
        if path is None:
            raise ExternalSystemError(f"no control socket for {address}: not a loopback address")
        self.path = path
        self._create_topic = create_topic
        self.path.unlink(missing_ok=True)  # left by a server that was killed
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(str(self.path))
            os.chmod(self.path, 0o600)
            self._server.listen()
        except OSError as e:
            self._server.close()
            raise ExternalSystemError(f"cannot open control socket {self.path}: {e.strerror or e}") from None
        threading.Thread(target=self._serve, name="sluice-kafka-control", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:  # closed
                return
            with connection:
                connection.settimeout(TIMEOUT_SECONDS)
                try:
                    answer = self._answer(_read_line(connection))
                    connection.sendall(json.dumps(answer).encode() + b"\n")
                except OSError:  # the client went away; nothing to tell it
                    pass

    def _answer(self, request: bytes) -> dict:
        try:
            asked = json.loads(request)
            name, partitions = asked["create_topic"], asked["partitions"]
        except (ValueError, KeyError, TypeError):
            return {"error": "invalid control request"}
        try:
            self._create_topic(name, partitions)
        except ExternalSystemError as e:
            return {"error": e.message}
        return {"ok": True}

    def close(self) -> None:
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        except OSError:
            pass
        self._server.close()
        self.path.unlink(missing_ok=True)


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data and len(data) < _REQUEST_LIMIT:
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def is_embedded(bootstrap: str) -> bool:
    """Whether `bootstrap` is an embedded broker: one of this process, or a `sluice kafka
    serve` whose control socket is there."""
    from sluice.kafka.embedded import in_process

    path = control_path(bootstrap)
    return in_process(bootstrap) is not None or (path is not None and path.exists())


def create_topic(
    bootstrap: str, name: str, partitions: int, config: dict | None = None, settings: dict | None = None
) -> None:
    """Create topic `name` with `partitions` partitions on the cluster at `bootstrap`:
    directly if it is an embedded broker of this process, through its control socket if
    it is a `sluice kafka serve`, else the admin API, with the topic configuration
    `settings` (which an embedded broker cannot keep: see the module docstring)."""
    from sluice.kafka.embedded import in_process

    embedded = in_process(bootstrap)
    if embedded is not None:
        embedded.create_topic(name, partitions)
        return
    path = control_path(bootstrap)
    if path is not None and path.exists():
        try:
            _ask_control(path, name, partitions)
            return
        except ConnectionRefusedError:  # a socket left by a server that was killed
            pass
    _create_by_admin(bootstrap, name, partitions, config or {}, settings or {})


def _ask_control(path: Path, name: str, partitions: int) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(TIMEOUT_SECONDS)
        connection.connect(str(path))
        request = {"create_topic": name, "partitions": partitions}
        connection.sendall(json.dumps(request).encode() + b"\n")
        answer = json.loads(_read_line(connection) or b"{}")
    if not answer.get("ok"):
        raise ExternalSystemError(answer.get("error") or f"cannot create kafka topic '{name}'")


def _create_by_admin(bootstrap: str, name: str, partitions: int, config: dict, settings: dict) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    what = f"cannot create kafka topic '{name}'"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, **config})
        futures = admin.create_topics(
            [NewTopic(name, partitions, config=settings)], request_timeout=TIMEOUT_SECONDS, operation_timeout=TIMEOUT_SECONDS
        )
        futures[name].result(TIMEOUT_SECONDS + 5)
    except KafkaException as e:
        raise ExternalSystemError(f"{what}: {kafka_reason(e.args[0].str())}") from None
    except Exception as e:  # a timeout, a refused configuration
        raise ExternalSystemError(f"{what}: {str(e) or type(e).__name__}") from None


def topic_config(bootstrap: str, name: str, config: dict | None = None) -> dict[str, str] | None:
    """Topic `name`'s configuration as the broker describes it (DescribeConfigs); None on
    an embedded broker, which keeps none."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    if is_embedded(bootstrap):
        return None
    what = f"cannot describe kafka topic '{name}'"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
        resource = ConfigResource(ResourceType.TOPIC, name)
        entries = admin.describe_configs([resource], request_timeout=TIMEOUT_SECONDS)[resource].result(TIMEOUT_SECONDS + 5)
    except KafkaException as e:
        raise ExternalSystemError(f"{what}: {kafka_reason(e.args[0].str())}") from None
    except Exception as e:  # a timeout
        raise ExternalSystemError(f"{what}: {str(e) or type(e).__name__}") from None
    return {entry_name: entry.value for entry_name, entry in entries.items()}


def list_topics(bootstrap: str, config: dict | None = None) -> dict[str, int]:
    """`{topic: partition count}` of the cluster, Kafka's internal topics left out. Asked
    through a consumer, which never creates a topic by asking about it."""
    from confluent_kafka import KafkaException

    client = _consumer(bootstrap, config)
    try:
        metadata = client.list_topics(timeout=TIMEOUT_SECONDS)
    except KafkaException as e:
        raise ExternalSystemError(
            f"cannot list the topics of kafka at {bootstrap}: {kafka_reason(e.args[0].str())}"
        ) from None
    finally:
        client.close()
    return {
        name: len(topic.partitions)
        for name, topic in sorted(metadata.topics.items())
        if not name.startswith("__") and topic.error is None
    }


def _consumer(bootstrap: str, config: dict | None):
    try:
        return consumer(bootstrap, config or {})
    except KafkaReadError as e:
        raise ExternalSystemError(f"cannot reach kafka at {bootstrap}: {e}") from None
