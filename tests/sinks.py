"""Reading a sink's topic back as a consumer with `isolation.level=read_committed` does:
what a transactional sink committed, nothing of what it aborted — on the embedded broker,
whose consumers see aborted transactions too, through sluice's filter by the sinks'
progress records (`kafka/consume.py`'s `SinkCommits`), as `sluice kafka consume` reads it."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from sluice.kafka.client import consumer, watermarks
from sluice.kafka.consume import SinkCommits


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed message of `topic` as (key, value), partition by partition."""
    messages = read_all(bootstrap, topic, timeout)
    commits = SinkCommits.of(bootstrap, topic)
    if commits is not None:
        try:
            messages = commits.passed(messages)
        finally:
            commits.close()
    return [(m.key(), m.value()) for m in messages]


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list:
    """Every message of `topic` a read_committed consumer of the broker returns, partition
    by partition (on the embedded broker: aborted transactions' too)."""
    partitions = sorted(watermarks(bootstrap, topic, {}))
    client = consumer(bootstrap, {"isolation.level": "read_committed"})
    try:
        client.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        messages: dict[int, list] = {p: [] for p in partitions}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"topic {topic!r} not read to its end in {timeout}s"
            for message in client.consume(num_messages=500, timeout=0.2):
                error = message.error()
                if error is None:
                    messages[message.partition()].append(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise AssertionError(error.str())
    finally:
        client.close()
    return [m for p in partitions for m in messages[p]]


def upserted(messages: list[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """An upsert topic's messages replayed: each key's last value, tombstones deleting."""
    state: dict[bytes, bytes] = {}
    for key, value in messages:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state
