"""The `sluice_kafka` data source against the embedded broker and a real Spark session."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.catalog.formats import Json
from sluice.catalog.types import JSONB, Column
from sluice.kafka.embedded import produce
from sluice.kafka.retry import RetryPolicy, SourceUnavailable
from sluice.spark.kafka_source import (
    NAME,
    TASK_MESSAGES,
    KafkaReadError,
    Options,
    admitted,
    decode_spec,
    read_range,
    tasks,
    watermarks,
)


def batch(spark, kafka, topic: str, ranges) -> list:
    df = (
        spark.read.format(NAME)
        .option("bootstrap", kafka.bootstrap)
        .option("topic", topic)
        .option("ranges", json.dumps(ranges))
        .load()
    )
    return sorted(df.collect(), key=lambda r: (r.partition, r.offset))


def full_ranges(kafka, topic: str) -> list:
    marks = watermarks(Options(kafka.bootstrap, topic, {}))
    return [[p, low, high] for p, (low, high) in marks.items()]


def test_batch_read_returns_every_message_exactly(spark, kafka) -> None:
    kafka.create_topic("t", 3)
    produce(kafka.bootstrap, "t", [(b"k0", b"v0"), (None, b"v1"), (b"k2", None)], partition=0,
            timestamp_ms=1_700_000_000_123)
    produce(kafka.bootstrap, "t", [(b"k3", b"")], partition=2, timestamp_ms=1_700_000_000_000)
    rows = batch(spark, kafka, "t", full_ranges(kafka, "t"))
    assert [(r.key, r.value, r.topic, r.partition, r.offset) for r in rows] == [
        (b"k0", b"v0", "t", 0, 0),
        (None, b"v1", "t", 0, 1),
        (b"k2", None, "t", 0, 2),
        (b"k3", b"", "t", 2, 0),
    ]
    # The session time zone is UTC, and Spark hands back naive datetimes in it.
    assert rows[0].timestamp == dt.datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert rows[0].timestampType == 0
    assert rows[0].headers == []
    assert spark.read.format(NAME).option("bootstrap", kafka.bootstrap).option("topic", "t").option(
        "ranges", "[]"
    ).load().schema.fieldNames() == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]


def test_batch_read_takes_exactly_the_ranges_given(spark, kafka) -> None:
    kafka.create_topic("t", 2)
    produce(kafka.bootstrap, "t", [(None, str(i).encode()) for i in range(50)], partition=0)
    produce(kafka.bootstrap, "t", [(None, str(i).encode()) for i in range(5)], partition=1)
    rows = batch(spark, kafka, "t", [[0, 10, 20], [1, 4, 5]])
    assert [(r.partition, r.offset, r.value) for r in rows] == [
        (0, o, str(o).encode()) for o in range(10, 20)
    ] + [(1, 4, b"4")]
    assert batch(spark, kafka, "t", [[0, 7, 7]]) == []


def test_reads_span_arrow_batches(kafka) -> None:
    kafka.create_topic("big", 1)
    produce(kafka.bootstrap, "big", [(None, b"x" * 10) for _ in range(2_500)], partition=0)
    options = Options(kafka.bootstrap, "big", {}, batch_size=1_000)
    sizes = [b.num_rows for b in read_range(options, 0, 0, 2_500)]
    assert sizes == [1_000, 1_000, 500]


def test_batches_end_at_a_byte_bound_too(kafka) -> None:
    # An Arrow column holds under 2 GiB: large messages end a batch before its count does.
    kafka.create_topic("large", 1)
    produce(kafka.bootstrap, "large", [(b"k", b"x" * 99) for _ in range(10)], partition=0)
    options = Options(kafka.bootstrap, "large", {}, batch_bytes=250)
    assert [b.num_rows for b in read_range(options, 0, 0, 10)] == [3, 3, 3, 1]


def test_headers_keep_their_order_and_bytes(kafka) -> None:
    from confluent_kafka import Producer

    kafka.create_topic("h", 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    producer.produce("h", value=b"v", partition=0, headers=[("a", b"1"), ("b", None), ("a", b"\xff")])
    producer.flush()
    (first,) = read_range(Options(kafka.bootstrap, "h", {}), 0, 0, 1)
    assert first.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}, {"key": "a", "value": b"\xff"}]
    ]


def test_streaming_resumes_from_its_checkpoint(spark, kafka, tmp_path) -> None:
    kafka.create_topic("s", 2)
    produce(kafka.bootstrap, "s", [(b"a", b"1"), (b"b", b"2")], partition=0)
    produce(kafka.bootstrap, "s", [(b"c", b"3")], partition=1)
    seen: list = []

    def run() -> None:
        stream = spark.readStream.format(NAME).option("bootstrap", kafka.bootstrap).option("topic", "s").load()
        query = (
            stream.writeStream.foreachBatch(lambda df, _: seen.extend(df.collect()))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    run()
    assert sorted((r.partition, r.offset) for r in seen) == [(0, 0), (0, 1), (1, 0)]
    produce(kafka.bootstrap, "s", [(b"d", b"4")], partition=1)
    seen.clear()
    run()
    assert [(r.partition, r.offset, r.value) for r in seen] == [(1, 1, b"4")]


def test_missing_topic_and_unreachable_broker_are_errors_not_hangs(kafka) -> None:
    with pytest.raises(KafkaReadError, match="topic 'nope' does not exist"):
        watermarks(Options(kafka.bootstrap, "nope", {}))
    kafka.create_topic("t", 1)
    produce(kafka.bootstrap, "t", [(None, b"x")], partition=0)
    kafka.set_broker_down(1)
    options = Options(kafka.bootstrap, "t", {}, retry=RetryPolicy(2, 1))
    with pytest.raises(SourceUnavailable, match="^topic 't' partition 0: no message at offset 0"):
        list(read_range(options, 0, 0, 1))


@given(
    backlogs=st.dictionaries(st.sampled_from("0123456789"), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))),
    most=st.integers(1, 10**6),
)
def test_a_bounded_micro_batch_takes_each_partition_s_share_and_always_moves_on(backlogs, most) -> None:
    start = {p: a for p, (a, _) in backlogs.items()}
    highs = {p: a + b for p, (a, b) in backlogs.items()}
    ends = admitted(start, highs, most)
    assert set(ends) == set(highs)
    assert all(start[p] <= ends[p] <= highs[p] for p in highs)
    read = sum(ends[p] - start[p] for p in highs)
    backlog = sum(highs[p] - start[p] for p in highs)
    assert read == backlog if backlog <= most else most <= read <= most + len(highs)
    assert all(ends[p] > start[p] for p in highs if highs[p] > start[p])  # every partition with a backlog


@given(sizes=st.lists(st.integers(0, 3 * TASK_MESSAGES), max_size=40))
def test_small_ranges_share_read_tasks_and_every_range_is_read_once(sizes) -> None:
    ranges = [(p, 1000, 1000 + size) for p, size in enumerate(sizes)]
    read = tasks(ranges)
    assert sorted(r for task in read for r in task.ranges) == [r for r in ranges if r[1] < r[2]]
    assert all(task.ranges for task in read)
    total = sum(sizes)
    nonempty = sum(1 for size in sizes if size)
    assert len(read) == min(nonempty, max(1, total // TASK_MESSAGES))
    if len(read) > 1 and len(read) < nonempty:  # packed: no task holds more than its share and one range
        loads = [sum(end - start for _, start, end in task.ranges) for task in read]
        assert max(loads) <= total / len(read) + max(sizes)


_KEYS = st.sampled_from([None, b"a", b"b", b"c", b"\xff", "é".encode()])
_VALUES = st.sampled_from([None, b"1", b"[2]", b'{"x": 3}', b"{bad", b"\xfe"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.lists(st.tuples(_KEYS, _VALUES), max_size=40),
    checks=st.sampled_from([{}, {"key": "utf8"}, {"key": "utf8", "value": "decoded"}]),
    batch_size=st.integers(1, 7),
)
def test_a_task_keeps_each_key_s_latest_message_and_every_one_whose_error_must_be_seen(
    kafka, messages, checks, batch_size
) -> None:
    topic = uuid.uuid4().hex
    kafka.create_topic(topic, 1)
    produce(kafka.bootstrap, topic, messages, partition=0)
    decode = {"value": decode_spec(Json((Column("data", JSONB, False),)))}
    every = Options(kafka.bootstrap, topic, {}, decode=decode)
    rows = {r["offset"]: r for b in read_range(every, 0, 0, len(messages)) for r in b.to_pylist()}
    reduced = Options(kafka.bootstrap, topic, {}, decode=decode, latest_per_key=checks, batch_size=batch_size)
    kept = [r for b in read_range(reduced, 0, 0, len(messages)) for r in b.to_pylist()]
    assert all(len(b) <= batch_size for b in read_range(reduced, 0, 0, len(messages)))
    latest = {key: offset for offset, (key, _) in enumerate(messages) if key is not None}

    def must_be_seen(offset: int) -> bool:
        key, value = messages[offset]
        bad_key = key is not None and "key" in checks and not _utf8(key)
        bad_value = "value" in checks and rows[offset]["value_error"] is not None
        return key is None or bad_key or bad_value or latest[key] == offset

    # Nothing else is kept, each kept row is the message as a full read gives it, and the
    # counts add up to every message, per key.
    assert [r["offset"] for r in kept] == [o for o in range(len(messages)) if must_be_seen(o)]
    assert all({k: v for k, v in r.items() if k != "count"} == rows[r["offset"]] for r in kept)
    for key in {k for k, _ in messages}:
        assert sum(r["count"] for r in kept if r["key"] == key) == sum(1 for k, _ in messages if k == key)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
