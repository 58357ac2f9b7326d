"""Reading a topic for a person or a test to look at: `sluice kafka consume`, and
`read_committed`, what the sqllogic runner's `kafka-verify` compares.

`consume` yields a header line, then one tab-separated line per message — partition, offset, key, value,
headers — with keys, values and headers in `encode.escaped` form (what `sluice kafka
produce` reads back as the same bytes), `NULL` for a null key or value, and headers as
`name=value` joined by `,`. It reads every partition from its end (or, asked, from its
beginning), and stops at the end of all of them when asked to, else when `stop` is set.

`read_committed` reads a topic from its beginning as a transactional consumer sees it
(`isolation.level=read_committed`: aborted and open transactions are not there), waiting
up to a bound for a number of messages and for the end of every partition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, TopicPartition

from sluice.errors import ExternalSystemError, UndefinedObject
from sluice.kafka.client import KafkaReadError, TopicMissing, consumer, kafka_reason, watermarks
from sluice.kafka.encode import escaped

_POLL_SECONDS = 0.2


def message_line(message) -> str:
    """One message as a line: partition, offset, key, value, headers."""
    headers = ",".join(
        f"{escaped(name.encode())}={'NULL' if value is None else escaped(value)}"
        for name, value in message.headers() or ()
    )
    key, value = message.key(), message.value()
    return "\t".join((
        str(message.partition()),
        str(message.offset()),
        "NULL" if key is None else escaped(key),
        "NULL" if value is None else escaped(value),
        headers,
    ))


def consume(
    bootstrap: str,
    topic: str,
    *,
    from_beginning: bool = False,
    exit_at_end: bool = False,
    stop: threading.Event | None = None,
) -> Iterator[str]:
    """The lines of `topic`'s messages as they come (see the module's docstring). The end
    `exit_at_end` stops at is each partition's end when the call began."""
    try:
        marks = watermarks(bootstrap, topic, {})
        ends = {p: high for p, (_, high) in marks.items()}
        client = consumer(bootstrap, {"auto.offset.reset": "earliest"})
    except TopicMissing:
        raise UndefinedObject(f"topic '{topic}' does not exist on kafka at {bootstrap}") from None
    except KafkaReadError as e:
        raise ExternalSystemError(f"cannot read topic '{topic}' from kafka at {bootstrap}: {e}") from None
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    client.assign([TopicPartition(topic, p, start) for p in ends])
    # Partitions with nothing (more) to read before their end.
    done = {p for p, (low, high) in marks.items() if not from_beginning or low >= high}
    yield "partition\toffset\tkey\tvalue\theaders"
    try:
        while not (stop is not None and stop.is_set()) and not (exit_at_end and len(done) == len(ends)):
            for message, at_end in _polled(client, topic):
                if not at_end:
                    yield message_line(message)
                    if message.offset() + 1 >= ends[message.partition()]:
                        done.add(message.partition())
                # A transactional topic ends in a commit marker no message stands for.
                elif message.offset() >= ends[message.partition()]:
                    done.add(message.partition())
    finally:
        client.close()


def _polled(client, topic: str) -> Iterator[tuple]:
    """One poll's messages, each with whether it is a partition's end event rather than a
    message; retriable errors are passed over, any other is an `ExternalSystemError`."""
    try:
        polled = client.consume(num_messages=500, timeout=_POLL_SECONDS)
    except KafkaException as e:
        raise ExternalSystemError(f"cannot read topic '{topic}': {kafka_reason(e.args[0].str())}") from None
    for message in polled:
        error = message.error()
        if error is None or error.code() == KafkaError._PARTITION_EOF:
            yield message, error is not None
        elif not error.retriable():
            raise ExternalSystemError(f"cannot read topic '{topic}': {kafka_reason(error.str())}")


def read_committed(bootstrap: str, topic: str, at_least: int, timeout: float) -> list:
    """`topic`'s committed messages in (partition, offset) order, once there are
    `at_least` of them and every partition is read to its end, or when `timeout` seconds
    have passed (a topic that does not exist yet is waited for too)."""
    deadline = time.monotonic() + timeout
    partitions = _partitions_when_there(bootstrap, topic, deadline)
    if partitions is None:
        return []
    client = consumer(bootstrap, {"isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    client.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    messages: list = []
    at_end: set[int] = set()
    try:
        while time.monotonic() < deadline and not (len(messages) >= at_least and at_end >= set(partitions)):
            for message, ended in _polled(client, topic):
                if ended:
                    at_end.add(message.partition())
                else:
                    messages.append(message)
                    at_end.discard(message.partition())
    finally:
        client.close()
    return sorted(messages, key=lambda m: (m.partition(), m.offset()))


def _partitions_when_there(bootstrap: str, topic: str, deadline: float) -> list[int] | None:
    while True:
        try:
            return sorted(watermarks(bootstrap, topic, {}))
        except TopicMissing:
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_SECONDS)
        except KafkaReadError as e:
            raise ExternalSystemError(f"cannot read topic '{topic}' from kafka at {bootstrap}: {e}") from None
