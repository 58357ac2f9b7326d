"""An embedded Kafka broker: librdkafka's mock cluster, reached through ctypes.

This module owns `EmbeddedKafka` — a real Kafka-protocol cluster on loopback, living in
this process's threads, for the REPL, demos and tests — and `produce`, a small helper that
writes messages to any cluster with `confluent_kafka.Producer`.

The mock is the one built into the librdkafka that `confluent_kafka` bundles (the same
shared object, so client and cluster agree on versions). Its behaviour, as measured with
librdkafka 2.16:

* brokers have ids 1..N and listen on ephemeral 127.0.0.1 ports;
  `rd_kafka_mock_broker_set_host_port` changes only the address a broker advertises, so
  a broker asked to listen on a given port gets a forwarding listener there
  (`kafka/forward.py`) and advertises that;
* topics must be made with `create_topic` (the admin CreateTopics call does not work
  against the mock); a topic a client touches first is auto-created with 4 partitions;
* each partition keeps only its last 5 MiB of record batches (or 100,000 batches, a
  limit the size one always reaches first): older batches are deleted whole and the
  low watermark moves up;
* transactions: it writes the commit and abort markers (an offset each), but a consumer
  with `isolation.level=read_committed` is returned the messages of aborted and of still
  open transactions as if committed (`kafka/progress.py` says how sluice reads sinks'
  topics on it); it answers neither DescribeConfigs (the admin client times out waiting
  for a controller) nor DeleteRecords ("required feature not supported by broker"), and
  keeps no topic configuration;
* a broker set down drops its connections and refuses new ones, and disappears from
  metadata, but keeps leading its partitions (no leader election); a client then sees
  `list_topics` block for its whole timeout and fail with "broker transport failure",
  `get_watermark_offsets` fail at once with "unknown partition", `consume` return nothing
  (no error) and its error callback report "1/1 brokers are down" and refused connections
  every ~50 ms; set up again, the same client reconnects by itself within its reconnection
  backoff and goes on where it was.

`client_ports` lists the connections clients hold (or just closed) to the brokers, as
the kernel counts them: how a test or a benchmark sees how many a client opens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import threading
from collections.abc import Iterable
from typing import Any

from sluice.errors import ExternalSystemError
from sluice.kafka.forward import Forwarder

_RD_KAFKA_PRODUCER = 0
# Kafka's own rule for topic names; the mock accepts anything, and aborts the process
# on a negative partition count, so both are checked here before reaching C.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def _library_path() -> str | None:
    """The librdkafka that confluent_kafka itself loads, or the system one."""
    return _wheel_library() or ctypes.util.find_library("rdkafka")


def _wheel_library() -> str | None:
    """The librdkafka bundled with confluent_kafka's wheel, if it is installed."""
    try:
        import confluent_kafka
    except ImportError:
        return None
    site = os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))
    for pattern in (
        "confluent_kafka.libs/librdkafka*.so*",  # Linux wheels (auditwheel)
        "confluent_kafka/.dylibs/librdkafka*.dylib",  # macOS wheels (delocate)
    ):
        found = sorted(glob.glob(os.path.join(site, pattern)))
        if found:
            return found[0]
    return None


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = _library_path()
        if path is None:
            raise ExternalSystemError("cannot find librdkafka for the embedded kafka broker")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise ExternalSystemError(f"cannot load librdkafka from {path}: {e}") from None
        vp, cp, i32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32
        signatures: dict[str, tuple[Any, list[Any]]] = {
            "rd_kafka_conf_new": (vp, []),
            "rd_kafka_conf_set": (ctypes.c_int, [vp, cp, cp, cp, ctypes.c_size_t]),
            "rd_kafka_conf_destroy": (None, [vp]),
            "rd_kafka_new": (vp, [ctypes.c_int, vp, cp, ctypes.c_size_t]),
            "rd_kafka_destroy": (None, [vp]),
            "rd_kafka_err2str": (cp, [ctypes.c_int]),
            "rd_kafka_mock_cluster_new": (vp, [vp, ctypes.c_int]),
            "rd_kafka_mock_cluster_destroy": (None, [vp]),
            "rd_kafka_mock_cluster_bootstraps": (cp, [vp]),
            "rd_kafka_mock_topic_create": (ctypes.c_int, [vp, cp, ctypes.c_int, ctypes.c_int]),
            "rd_kafka_mock_broker_set_down": (ctypes.c_int, [vp, i32]),
            "rd_kafka_mock_broker_set_up": (ctypes.c_int, [vp, i32]),
            "rd_kafka_mock_broker_set_host_port": (ctypes.c_int, [vp, i32, cp, ctypes.c_int]),
        }
        try:
            for name, (restype, argtypes) in signatures.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
        except AttributeError as e:
            raise ExternalSystemError(
                f"librdkafka at {path} lacks the mock cluster api: {e}"
            ) from None
        _lib = lib
        return lib


def _reason(text: str) -> str:
    """librdkafka's error text in sluice's style: "Broker: Topic already exists" becomes
    "topic already exists"."""
    for prefix in ("Broker: ", "Local: "):
        text = text.removeprefix(prefix)
    return text.rstrip(".").lower()


def _err2str(lib: ctypes.CDLL, code: int) -> str:
    raw = lib.rd_kafka_err2str(code)
    return _reason(raw.decode(errors="replace") if raw else f"error {code}")


class EmbeddedKafka:
    """librdkafka's mock Kafka cluster on loopback, for the REPL, demos and tests.

    `bootstrap` is what clients pass as `bootstrap.servers`. With `port`, broker i listens
    on 127.0.0.1:`port`+i-1 (through a forwarder) instead of an ephemeral port. Use as a
    context manager, or call `close()` (idempotent) when done; the cluster lives in
    background threads of this process and vanishes with it.
    """

    def __init__(self, brokers: int = 1, port: int | None = None) -> None:
        if isinstance(brokers, bool) or not isinstance(brokers, int) or brokers < 1:
            raise ValueError(f"brokers must be a positive integer, not {brokers!r}")
        if port is not None and not 0 < port <= 65536 - brokers:
            raise ExternalSystemError(f"cannot listen on port {port}: not a port number")
        self._lib = _load()
        self._lock = threading.Lock()
        self._brokers = brokers
        self._rk: int | None = None
        self._cluster: int | None = None
        self._forwarders: list[Forwarder] = []
        lib = self._lib
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # The handle only hosts the cluster and never connects anywhere; keep its
        # "no bootstrap.servers" notice (level 5) off stderr, but let errors through.
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not rk:
            lib.rd_kafka_conf_destroy(conf)  # rd_kafka_new takes the conf only on success
            reason = errstr.value.decode(errors="replace").rstrip(".").lower()
            raise ExternalSystemError(f"cannot start the embedded kafka broker: {reason}")
        cluster = lib.rd_kafka_mock_cluster_new(rk, brokers)
        if not cluster:
            lib.rd_kafka_destroy(rk)
            raise ExternalSystemError("cannot start the embedded kafka broker")
        self._rk, self._cluster = rk, cluster
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
        if port is not None:
            try:
                self._listen_on(port)
            except ExternalSystemError:
                self.close()
                raise
        _IN_PROCESS[self.bootstrap] = self

    def _listen_on(self, port: int) -> None:
        """Broker i listens on `port`+i-1 and advertises that address."""
        addresses = []
        for broker_id, own in enumerate(self.bootstrap.split(","), 1):
            host, own_port = own.rsplit(":", 1)
            forwarder = Forwarder(host, port + broker_id - 1, (host, int(own_port)))
            self._forwarders.append(forwarder)
            code = self._lib.rd_kafka_mock_broker_set_host_port(
                self._cluster, broker_id, host.encode(), port + broker_id - 1
            )
            if code:
                raise ExternalSystemError(
                    f"cannot listen on {forwarder.address}: {_err2str(self._lib, code)}"
                )
            addresses.append(forwarder.address)
        self.bootstrap = ",".join(addresses)

    @property
    def brokers(self) -> int:
        """How many brokers the cluster has; their ids are 1..brokers."""
        return self._brokers

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create `name` with `partitions` partitions, partition p led by broker p % brokers + 1.

        Replication factor 1: the mock picks a random leader among a partition's replicas
        and never moves it, so more replicas would only make leadership unpredictable.
        """
        if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            raise ExternalSystemError(f"cannot create kafka topic {name!r}: invalid topic name")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ExternalSystemError(
                f"cannot create kafka topic '{name}': partitions must be a positive integer"
            )
        with self._lock:
            cluster = self._live(f"cannot create kafka topic '{name}'")
            code = self._lib.rd_kafka_mock_topic_create(cluster, name.encode(), partitions, 1)
        if code:
            raise ExternalSystemError(
                f"cannot create kafka topic '{name}': {_err2str(self._lib, code)}"
            )

    def set_broker_down(self, broker_id: int) -> None:
        """Drop broker `broker_id`'s connections and refuse new ones until `set_broker_up`."""
        self._set_broker(broker_id, down=True)

    def set_broker_up(self, broker_id: int) -> None:
        """Let broker `broker_id` accept connections again."""
        self._set_broker(broker_id, down=False)

    def _set_broker(self, broker_id: int, *, down: bool) -> None:
        what = f"cannot set kafka broker {broker_id} {'down' if down else 'up'}"
        lib = self._lib
        fn = lib.rd_kafka_mock_broker_set_down if down else lib.rd_kafka_mock_broker_set_up
        with self._lock:
            code = fn(self._live(what), broker_id)
        if code:
            raise ExternalSystemError(f"{what}: {_err2str(self._lib, code)}")

    def client_ports(self) -> set[int]:
        """The client-side ports of TCP connections to the cluster's brokers, from the
        kernel's table (`/proc/net/tcp`, Linux). A closed connection stays listed for
        about a minute (TIME_WAIT), so two calls a few seconds apart see every connection
        opened in between."""
        if self._forwarders:
            ports = {f.target[1] for f in self._forwarders}
        else:
            ports = {int(address.rsplit(":", 1)[1]) for address in self.bootstrap.split(",")}
        found = set()
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                local, remote = (int(a.split(":")[1], 16) for a in line.split()[1:3])
                if remote in ports:
                    found.add(local)
                elif local in ports and remote:
                    found.add(remote)
        return found

    def _live(self, what: str) -> int:
        if self._cluster is None:
            raise ExternalSystemError(f"{what}: the embedded kafka broker is closed")
        return self._cluster

    def close(self) -> None:
        """Stop the cluster (clients connected to it see their connections drop)."""
        bootstrap = getattr(self, "bootstrap", None)  # unset when __init__ failed before it
        if bootstrap is not None and _IN_PROCESS.get(bootstrap) is self:
            del _IN_PROCESS[bootstrap]
        with self._lock:
            cluster, rk = self._cluster, self._rk
            self._cluster = self._rk = None
            forwarders, self._forwarders = self._forwarders, []
        for forwarder in forwarders:
            forwarder.close()
        if cluster is not None:
            self._lib.rd_kafka_mock_cluster_destroy(cluster)
        if rk is not None:
            self._lib.rd_kafka_destroy(rk)

    def __enter__(self) -> EmbeddedKafka:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._cluster is None else self.bootstrap
        return f"EmbeddedKafka(brokers={self._brokers}, {state})"


# The embedded brokers this process runs, by bootstrap address: what creates a topic on
# one finds it here (its Kafka protocol cannot), as `sluice kafka serve`'s control socket
# serves the same for other processes.
_IN_PROCESS: dict[str, EmbeddedKafka] = {}


def in_process(bootstrap: str) -> EmbeddedKafka | None:
    """The embedded broker of this process serving `bootstrap`, if there is one."""
    return _IN_PROCESS.get(bootstrap)


def produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[tuple],
    partition: int | None = None,
    timestamp_ms: int | None = None,
) -> None:
    """Write `(key, value)` pairs, or `(key, value, headers)` with headers a list of
    `(name, bytes)`, to `topic` and wait until all are acknowledged.

    Keys and values may be None (null keys, tombstones). `partition` None lets the
    producer's partitioner choose; `timestamp_ms` None lets the producer stamp each
    message. Raises `ExternalSystemError` if any message was not delivered (a message
    that cannot reach its leader fails after 30 seconds).
    """
    from confluent_kafka import KafkaException, Producer

    try:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 30_000,
            }
        )
    except KafkaException as e:
        reason = _reason(e.args[0].str())
        raise ExternalSystemError(f"cannot produce to kafka topic '{topic}': {reason}") from None
    failures: list[str] = []
    sent = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err.str()))

    extra: dict[str, Any] = {}
    if partition is not None:
        extra["partition"] = partition
    if timestamp_ms is not None:
        extra["timestamp"] = timestamp_ms
    try:
        for key, value, *headers in messages:
            while True:
                try:
                    producer.produce(
                        topic, value=value, key=key, headers=headers[0] if headers else None,
                        on_delivery=on_delivery, **extra,
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
        remaining = producer.flush(40)
    except KafkaException as e:
        reason = _reason(e.args[0].str())
        raise ExternalSystemError(f"cannot produce to kafka topic '{topic}': {reason}") from None
    if remaining or failures:
        first = failures[0] if failures else "timed out waiting for acknowledgements"
        failed = len(failures) + remaining
        raise ExternalSystemError(
            f"cannot produce to kafka topic '{topic}': {failed} of {sent} messages failed"
            f" ({_reason(first)})"
        )
