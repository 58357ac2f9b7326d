"""`EmbeddedKafka` speaks the real Kafka protocol: real confluent_kafka clients create,
write, read and lose it; `sluice kafka` serves one until interrupted."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from sluice.errors import ExternalSystemError
from sluice.kafka.embedded import EmbeddedKafka, produce

TIMEOUT = 10.0  # upper bound for anything that should take milliseconds


@pytest.fixture
def kafka() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka() as cluster:
        yield cluster


def consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sluice-test",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 100,
        }
    )


def read_all(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, list]:
    """Every message of the given partitions, from the beginning to the end."""
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: dict[int, list] = {p: [] for p in partitions}
        at_end: set[int] = set()
        deadline = time.monotonic() + TIMEOUT
        while at_end != set(partitions):
            assert time.monotonic() < deadline, f"only reached the end of {at_end}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.timestamp()))
        return got
    finally:
        c.close()


def test_create_topic_has_the_partitions(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("orders", partitions=3)
    kafka.create_topic("single")
    c = consumer(kafka.bootstrap)
    try:
        topics = c.list_topics(timeout=TIMEOUT).topics
    finally:
        c.close()
    assert sorted(topics["orders"].partitions) == [0, 1, 2]
    assert sorted(topics["single"].partitions) == [0]
    assert topics["orders"].error is None


def test_create_topic_failures_name_the_topic(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("orders", partitions=2)
    with pytest.raises(ExternalSystemError) as e:
        kafka.create_topic("orders", partitions=2)
    assert e.value.message == "cannot create kafka topic 'orders': topic already exists"
    assert e.value.code == "58000"
    # The mock itself would take these (or abort the process); they are refused first.
    for name, partitions in [("bad name", 1), ("", 1), ("zero", 0), ("negative", -1)]:
        with pytest.raises(ExternalSystemError) as e:
            kafka.create_topic(name, partitions)
        assert f"'{name}'" in e.value.message
        assert e.value.message == e.value.message.lower() and not e.value.message.endswith(".")


def test_produce_and_consume_back_exactly(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("events", partitions=3)
    ts = 1_700_000_000_000
    first = [(b"k1", b"v1"), (None, b"unkeyed"), (b"k1", None), (b"", b"")]
    third = [(b"k2", b"v2"), (None, None)]
    produce(kafka.bootstrap, "events", first, partition=0, timestamp_ms=ts)
    produce(kafka.bootstrap, "events", third, partition=2, timestamp_ms=ts + 1)

    got = read_all(kafka.bootstrap, "events", [0, 1, 2])
    assert got[0] == [
        (offset, k, v, (TIMESTAMP_CREATE_TIME, ts)) for offset, (k, v) in enumerate(first)
    ]
    assert got[1] == []
    assert got[2] == [
        (offset, k, v, (TIMESTAMP_CREATE_TIME, ts + 1)) for offset, (k, v) in enumerate(third)
    ]

    c = consumer(kafka.bootstrap)
    try:
        marks = [
            c.get_watermark_offsets(TopicPartition("events", p), timeout=TIMEOUT)
            for p in (0, 1, 2)
        ]
    finally:
        c.close()
    assert marks == [(0, 4), (0, 0), (0, 2)]


def test_produce_without_partition_spreads_over_the_topic(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("spread", partitions=3)
    messages = [(f"key-{i}".encode(), f"{i}".encode()) for i in range(30)]
    produce(kafka.bootstrap, "spread", messages)
    got = read_all(kafka.bootstrap, "spread", [0, 1, 2])
    assert sorted((k, v) for part in got.values() for _, k, v, _ in part) == sorted(messages)
    # The same key always lands on the same partition.
    homes = {k: p for p, part in got.items() for _, k, _, _ in part}
    produce(kafka.bootstrap, "spread", [(b"key-7", b"again")])
    again = read_all(kafka.bootstrap, "spread", [homes[b"key-7"]])[homes[b"key-7"]]
    assert again[-1][1:3] == (b"key-7", b"again")


def test_produce_failure_raises(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("small", partitions=1)
    with pytest.raises(ExternalSystemError) as e:
        produce(kafka.bootstrap, "small", [(b"k", b"v")], partition=5)
    assert e.value.message.startswith("cannot produce to kafka topic 'small': 1 of 1 messages")
    assert e.value.message.endswith("(unknown partition)")


def test_broker_down_then_up(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("t", partitions=1)
    c = consumer(kafka.bootstrap)
    try:
        assert "t" in c.list_topics(timeout=TIMEOUT).topics
        kafka.set_broker_down(1)
        with pytest.raises(KafkaException):
            c.list_topics(timeout=1)
        kafka.set_broker_up(1)
        assert "t" in c.list_topics(timeout=TIMEOUT).topics
    finally:
        c.close()
    with pytest.raises(ExternalSystemError, match="cannot set kafka broker 9 down"):
        kafka.set_broker_down(9)


def test_brokers_and_bootstrap() -> None:
    with EmbeddedKafka(brokers=3) as cluster:
        servers = cluster.bootstrap.split(",")
        assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers)
        cluster.create_topic("wide", partitions=6)
        c = consumer(cluster.bootstrap)
        try:
            metadata = c.list_topics(timeout=TIMEOUT)
        finally:
            c.close()
        assert sorted(metadata.brokers) == [1, 2, 3]
        leaders = {p.id: p.leader for p in metadata.topics["wide"].partitions.values()}
        assert leaders == {p: p % 3 + 1 for p in range(6)}
        # A broker down keeps leading its partitions: they go dark, the others answer.
        cluster.set_broker_down(2)
        c = consumer(cluster.bootstrap)
        try:
            assert c.get_watermark_offsets(TopicPartition("wide", 0), timeout=TIMEOUT) == (0, 0)
            with pytest.raises(KafkaException):
                c.get_watermark_offsets(TopicPartition("wide", 1), timeout=1)
        finally:
            c.close()


def test_close_is_idempotent() -> None:
    cluster = EmbeddedKafka()
    cluster.create_topic("t")
    cluster.close()
    cluster.close()
    with pytest.raises(ExternalSystemError, match="cannot create kafka topic 'u': .* closed"):
        cluster.create_topic("u")
    with EmbeddedKafka() as other:
        pass
    other.close()


def test_cli_serves_until_sigint() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.cli.main", "kafka", "--topic", "t:2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Buffered stdout, as when piped into another program: the line must be flushed.
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
    )
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(timeout=TIMEOUT), "no output from sluice kafka"
        line = proc.stdout.readline().decode()
        assert line.startswith("kafka listening on 127.0.0.1:") and line.endswith("\n")
        bootstrap = line.removeprefix("kafka listening on ").strip()
        c = consumer(bootstrap)
        try:
            assert sorted(c.list_topics("t", timeout=TIMEOUT).topics["t"].partitions) == [0, 1]
        finally:
            c.close()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert out == b""
    assert b"Traceback" not in err


def test_partition_keeps_only_its_last_5_mib(kafka: EmbeddedKafka) -> None:
    kafka.create_topic("log", partitions=1)
    for _ in range(3):
        produce(kafka.bootstrap, "log", [(None, b"x" * 1000)] * 4000, partition=0)
    c = consumer(kafka.bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition("log", 0), timeout=TIMEOUT)
        assert high == 12_000
        assert low > 0 and 4000 <= high - low <= 6000  # ~5 MiB, trimmed a whole batch at a time
        c.assign([TopicPartition("log", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT
        while (msg := c.poll(0.5)) is None or msg.error():
            assert time.monotonic() < deadline
        assert msg.offset() == low
    finally:
        c.close()
