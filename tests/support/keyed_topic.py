"""The keys and values (good, bad and null) the UPSERT tests produce to a topic of two
partitions, and producing them there as Kafka's partitioner would: a key always to the
same partition, each message with the offset the broker gave it (`upsert_model.Message`)."""

from __future__ import annotations

from sluice.kafka.client import watermarks
from sluice.kafka.embedded import produce
from tests.support.upsert_model import Message

KEYS = [b"a", b"b", b"c", b"\xff", None]
VALUES = [b'{"v":1}', b'{"v":2}', b"{bad", None]


def partition_of(key: bytes | None) -> int:
    # A key stays in one partition, as Kafka's partitioner keeps it.
    return 0 if key in (b"a", b"\xff", None) else 1


def send(bootstrap: str, topic: str, pairs) -> list[Message]:
    """Produce `pairs` in order, each key to its partition; the messages with offsets."""
    sent = []
    for partition in (0, 1):
        chosen = [(k, v) for k, v in pairs if partition_of(k) == partition]
        start = watermarks(bootstrap, topic, {})[partition][1]
        produce(bootstrap, topic, chosen, partition=partition)
        sent += [Message(partition, start + i, k, v) for i, (k, v) in enumerate(chosen)]
    return sent
