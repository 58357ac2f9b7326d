"""Kafka metadata through confluent-kafka, with no Spark: consumers, watermarks, topics.

Used by the reader inside Spark and, before planning, by the session (a topic a source
names must exist). Failures are `KafkaReadError`s whose text names the topic; transient
ones (a broker unreachable, a partition without a leader, a request timed out) are retried
under the source's `RetryPolicy` where one is given.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from sluice.kafka.retry import RetryPolicy, TransientFault

METADATA_TIMEOUT_SECONDS = 10.0
T = TypeVar("T")

# librdkafka's own log lines (every refused reconnection while a broker is down) go to
# this logger, silent unless the application configures logging, rather than to the
# terminal: sluice reports a lasting fault itself.
LOG = logging.getLogger(__name__)
LOG.addHandler(logging.NullHandler())

# Errors after which the same request may succeed: the broker is unreachable or restarting,
# a partition's leader is moving, a request timed out. A partition the client no longer
# knows (`_UNKNOWN_PARTITION`) is one whose leader went away from its metadata; a request
# to a broker the client dropped meanwhile (`_DESTROY_BROKER`, "broker handle destroyed
# without termination": it left the cluster's metadata during an outage) is asked again
# of the brokers it knows now.
TRANSIENT_ERRORS = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._DESTROY_BROKER,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.KAFKA_STORAGE_ERROR,
    }
)


class KafkaReadError(RuntimeError):
    """A topic's metadata or a range of it could not be read."""


class TopicMissing(KafkaReadError):
    pass


class OffsetsRegressed(KafkaReadError):
    """The topic's offsets went backwards past what a source committed (a topic deleted and
    created again, a broker restored from an older copy, a partition that lost data): what
    the source holds is not in the topic any more, and what the topic holds below its
    committed offsets would never be read. A fault for good, never "caught up"."""


def regression(committed: dict[int, int], highs: dict[int, int]) -> str | None:
    """Why a source that committed `committed` (`{partition: next offset}`) cannot go on
    reading a topic whose high watermarks are now `highs`, or None if it can."""
    gone = [p for p, offset in committed.items() if offset > 0 and p not in highs]
    if gone:
        return f"topic was recreated: partition count regressed from {max(committed) + 1} to {len(highs)}"
    for partition, offset in sorted(committed.items()):
        if highs.get(partition, offset) < offset:
            return regressed(partition, highs[partition], f"the committed offset {offset}")
    return None


def regressed(partition: int, high: int, below: str) -> str:
    """The words of a partition whose high watermark went below `below` (an offset, named):
    Materialize's ("topic was recreated: high watermark of partition …"), naming the
    offset it went below rather than the high watermark before."""
    return f"topic was recreated: high watermark of partition {partition} regressed to {high}, below {below}"


# CREATE CONNECTION … TO KAFKA options → librdkafka configuration properties.
_CLIENT_PROPERTIES = {
    "SECURITY PROTOCOL": "security.protocol",
    "SASL MECHANISMS": "sasl.mechanisms",
    "SASL USERNAME": "sasl.username",
    "SASL PASSWORD": "sasl.password",
    "SSL CERTIFICATE AUTHORITY": "ssl.ca.pem",
    "SSL CERTIFICATE": "ssl.certificate.pem",
    "SSL KEY": "ssl.key.pem",
}


# Options librdkafka reads case-sensitively in upper case, which users need not write so.
_UPPER_CASE = {"SECURITY PROTOCOL", "SASL MECHANISMS"}


def connection_config(options: dict[str, str]) -> dict[str, str]:
    """The client configuration of a Kafka connection's options (OPTION NAME → value, as
    `catalog.secrets.connection_options` gives them)."""
    return {
        _CLIENT_PROPERTIES[name]: value.upper() if name in _UPPER_CASE else value
        for name, value in options.items()
        if name in _CLIENT_PROPERTIES
    }


def kafka_reason(text: str) -> str:
    """librdkafka's error text in sluice's style: "Failed to get metadata: Local: Broker
    transport failure" becomes "failed to get metadata: broker transport failure"."""
    for prefix in ("Broker: ", "Local: "):
        text = text.replace(prefix, "")
    return text.rstrip(".").lower()


def transient(error: KafkaError) -> bool:
    return error.retriable() or error.code() in TRANSIENT_ERRORS


class Consumer(confluent_kafka.Consumer):
    """A consumer that remembers the last error librdkafka reported by itself (a broker
    down, a connection refused): `consume` returns nothing at all while a broker is away,
    so this is how a stalled read names its cause."""

    def __init__(self, config: dict) -> None:
        self.last_fault: str | None = None
        super().__init__({**config, "error_cb": self._note, "logger": LOG})

    def _note(self, error: KafkaError) -> None:
        self.last_fault = kafka_reason(error.str())


def consumer(bootstrap: str, config: dict, retry: RetryPolicy | None = None) -> Consumer:
    """A consumer of sluice's settings; with `retry`, reconnecting by its backoff. A
    `KafkaReadError` if librdkafka refuses the connection's configuration (a value it does
    not know, a certificate it cannot read)."""
    with _configured():
        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "sluice",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                # A deleted offset is an error to report, never a silent jump to either end.
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 10,
                **(retry.client_config() if retry is not None else {}),
                **config,
            }
        )


@contextmanager
def _configured() -> Iterator[None]:
    """A client librdkafka refuses to create for its configuration, as a `KafkaReadError`."""
    try:
        yield
    except (KafkaException, ValueError, TypeError) as e:
        reason = e.args[0].str() if isinstance(e, KafkaException) else str(e)
        raise KafkaReadError(f"invalid connection configuration: {reason}") from None


# What librdkafka reports of a connection that fails, in Materialize's words (its
# MzKafkaError): the first pattern found in an error names it.
_VALIDATION_FAILURES = (
    ("Authentication failed: Invalid username or password", "Invalid username or password"),
    ("broker certificate could not be verified", "Invalid CA certificate"),
    ("connecting to a SSL listener?", "Disconnected during handshake; broker might require SSL encryption"),
    ("client SSL authentication might be required", "SSL authentication required"),
    ("connecting to a PLAINTEXT broker listener", "Broker does not support SSL connections"),
    ("Broker did not provide a certificate", "Broker did not provide a certificate"),
    ("Failed to verify broker certificate: ", "Failed to verify broker certificate"),
    ("request(s) timed out: disconnect", "Connection timeout"),
    ("Failed to resolve", "Failed to resolve hostname"),
    ("mechanism handshake failed:", "Unsupported SASL mechanism"),
    ("broker might require SASL authentication", "SASL authentication required"),
    ("SASL authentication error: Authentication failed", "SASL authentication failed"),
    ("probably due to broker version < 0.10", "Unsupported broker version"),
    ("Disconnected while requesting ApiVersion", "Broker transport failure"),
    ("Broker transport failure", "Broker transport failure"),
    ("Connection refused", "Broker transport failure"),
)
_CONNECTION_RESETS = ("Send failed: ", "Receive failed: ")
_ALL_BROKERS_DOWN = re.compile(r"(\d+)/\1 brokers are down")
ALL_BROKERS_DOWN = "All brokers down"
VALIDATE_TIMEOUT_SECONDS = 10.0
# What Materialize's validation reports of a connection without a broker address: its
# metadata request has no broker to go to.
NO_BROKER_FAILURE = "Meta data fetch error: BrokerTransportFailure (Local: Broker transport failure)"


def validation_failure(text: str) -> str | None:
    """Materialize's words for a librdkafka error text, None for one it has none for."""
    for pattern, words in _VALIDATION_FAILURES:
        if pattern in text:
            return words
    for prefix in _CONNECTION_RESETS:
        if prefix in text:
            return f"Connection reset: {text.split(prefix, 1)[1]}"
    return ALL_BROKERS_DOWN if _ALL_BROKERS_DOWN.search(text) else None


def _most_specific(texts: list[str]) -> str | None:
    """Materialize's words for the most telling of `texts` (librdkafka's errors so far):
    any failure it names over its brokers being down."""
    found = [words for words in map(validation_failure, texts) if words is not None]
    return next((words for words in found if words != ALL_BROKERS_DOWN), found[0] if found else None)


def validate_connection(bootstrap: str, config: dict, timeout: float = VALIDATE_TIMEOUT_SECONDS) -> None:
    """Reach the brokers as Materialize validates a Kafka connection (a metadata request),
    or raise `KafkaReadError` with Materialize's words for why not. A failure librdkafka
    reports (a refused port, an unknown host, a refused login) ends the wait at once; a
    broker that never answers, after `timeout`."""
    if not any(address.strip() for address in bootstrap.split(",")):
        raise KafkaReadError(NO_BROKER_FAILURE)
    reported: list[str] = []
    with _configured():
        client = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "sluice", "logger": LOG,
             "error_cb": lambda error: reported.append(error.str()), **config}
        )
    started = time.monotonic()
    deadline = started + timeout
    try:
        while True:
            try:
                client.list_topics(timeout=0.2)
                return
            except KafkaException as e:
                last = e.args[0].str()
            client.poll(0)  # serves the error callback
            known = _most_specific(reported)
            # "All brokers down" follows the failure that downed them: wait a moment for it.
            if known is not None and (known != ALL_BROKERS_DOWN or time.monotonic() >= started + 1):
                raise KafkaReadError(known)
            if time.monotonic() >= deadline:
                raise KafkaReadError(
                    f"Internal kafka error: {reported[0]}" if reported else f"Meta data fetch error: {last}"
                )
    finally:
        client.close()


class TopicWatermarks:
    """A topic's watermarks, asked through one consumer for as long as this lives: a
    stream polls its topic every trigger, and a consumer per poll would open new broker
    connections each time. Close it when done."""

    def __init__(self, bootstrap: str, topic: str, config: dict, retry: RetryPolicy | None = None) -> None:
        self.topic = topic
        self.retry = retry
        self.consumer = consumer(bootstrap, config, retry)

    def get(self) -> dict[int, tuple[int, int]]:
        """`{partition: (low, high)}` (see `retried`)."""
        return retried(self._attempt, self.topic, self.retry)

    def _attempt(self, timeout: float) -> dict[int, tuple[int, int]]:
        topic = self.topic
        with _faults(topic):
            found = self.consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if found is None or (
                found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                raise TopicMissing(f"topic {topic!r} does not exist")
            if found.error is not None:
                raise KafkaException(found.error)
            return {
                p: self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
                for p in sorted(found.partitions)
            }

    def close(self) -> None:
        self.consumer.close()


def retried(attempt: Callable[[float], T], topic: str, retry: RetryPolicy | None) -> T:
    """`attempt`'s result, its transient faults retried under `retry` (past it:
    `SourceUnavailable`); without a policy it is tried once and a fault is a
    `KafkaReadError`."""
    if retry is not None:
        return retry.call(attempt, f"topic {topic!r}")
    try:
        return attempt(METADATA_TIMEOUT_SECONDS)
    except TransientFault as e:
        raise KafkaReadError(f"topic {topic!r}: {e}") from None


@contextmanager
def _faults(topic: str) -> Iterator[None]:
    """A `KafkaException` inside as a `TransientFault` (retry it) or a `KafkaReadError`."""
    try:
        yield
    except KafkaException as e:
        error = e.args[0]
        if transient(error):
            raise TransientFault(kafka_reason(error.str())) from None
        raise KafkaReadError(f"topic {topic!r}: {kafka_reason(error.str())}") from None


def watermarks(
    bootstrap: str, topic: str, config: dict, retry: RetryPolicy | None = None
) -> dict[int, tuple[int, int]]:
    """`{partition: (low, high)}` of the topic, asked once (see `TopicWatermarks`)."""
    asked = TopicWatermarks(bootstrap, topic, config, retry)
    try:
        return asked.get()
    finally:
        asked.close()


def offsets_for_timestamp(
    bootstrap: str,
    topic: str,
    config: dict,
    timestamp_ms: int,
    marks: dict[int, tuple[int, int]],
    retry: RetryPolicy | None = None,
) -> dict[int, int]:
    """Per partition, the first offset whose message timestamp is at least `timestamp_ms`.

    Brokers answer this from their time index; where a broker answers "none" (-1, as the
    embedded mock always does) but the partition's last message is late enough, a binary
    search over the partition's messages finds it, so both behave the same.
    """

    def attempt(timeout: float) -> dict[int, int]:
        client = consumer(bootstrap, config, retry)
        try:
            with _faults(topic):
                asked = [TopicPartition(topic, p, timestamp_ms) for p in marks]
                answered = {tp.partition: tp.offset for tp in client.offsets_for_times(asked, timeout=timeout)}
                result = {}
                for partition, (low, high) in marks.items():
                    offset = answered.get(partition, -1)
                    if offset < 0:
                        offset = _search(client, topic, partition, low, high, timestamp_ms)
                    result[partition] = offset
                return result
        finally:
            client.close()

    return retried(attempt, topic, retry)


def _search(client: Consumer, topic: str, partition: int, low: int, high: int, ts: int) -> int:
    """The first offset in [low, high) with timestamp >= ts (high if none), assuming
    timestamps grow with offsets as Kafka's own time index does."""
    while low < high:
        middle = (low + high) // 2
        if _timestamp_at(client, topic, partition, middle) >= ts:
            high = middle
        else:
            low = middle + 1
    return low


def _timestamp_at(client: Consumer, topic: str, partition: int, offset: int) -> int:
    client.assign([TopicPartition(topic, partition, offset)])
    for _ in range(20):
        for message in client.consume(num_messages=1, timeout=0.5):
            error = message.error()
            if error is None:
                return message.timestamp()[1]
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaReadError(f"topic {topic!r} partition {partition}: {error.str()}")
    raise KafkaReadError(f"topic {topic!r} partition {partition}: no message at offset {offset}")
