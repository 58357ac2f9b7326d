"""Reading a sink's topic back as a consumer with `isolation.level=read_committed` does:
what a transactional sink committed, nothing of what it aborted."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from sluice.kafka.client import consumer, watermarks


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed message of `topic` as (key, value), partition by partition."""
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
                    messages[message.partition()].append((message.key(), message.value()))
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
