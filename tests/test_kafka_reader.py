"""The `sluice_kafka` data source against the embedded broker and a real Spark session."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.kafka.embedded import produce
from sluice.kafka.reader import NAME, KafkaReadError, Options, admitted, read_range, watermarks
from sluice.kafka.retry import RetryPolicy, SourceUnavailable


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
