"""Streams outlive transient faults (KIP-298's retry): an outage shorter than a source's
RETRY TIMEOUT only delays its results; past it the source shows itself failed, with the
reason, in SHOW SOURCE STATISTICS and in every query's error, and it recovers by itself
once the fault clears — nothing lost, nothing duplicated. A topic whose offsets went
backwards (recreated under a source) is a fault for good, until the source is created
again. Real Spark, the embedded broker (`set_broker_down/up`; a topic re-created by
restarting `sluice kafka serve`, or a broker of this process, on the same port:
tests/support/recreated_topic.py) and a real schema registry server (tests/support/registry.py)."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable

import sluice
from sluice.kafka import retry
from sluice.kafka.avro_decode import AvroDecoder
from sluice.kafka.client import OffsetsRegressed, regression, transient, watermarks
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.encode import avro_datum, confluent_frame
from sluice.kafka.retry import RetryPolicy, SourceUnavailable, TransientFault, reason_of
from sluice.spark.failures import WORKER_LATE, failure_reason
from sluice.spark.kafka_source import KafkaStreamReader, Options, read_range
from tests.support.recreated_topic import (
    Recreatable,
    create_source,
    numbered,
    renamed,
    start_over,
    start_over_hint,
    statistics,
    wait_for,
)
from tests.support.registry import Registry

SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}]}
# Small bounds, so a fault outlasts them in seconds.
SHORT_RETRY = "WITH (RETRY TIMEOUT = '2s', RETRY DELAY MAX = '500ms')"


def failed_reason(session: sluice.Session, source: str) -> str | None:
    row = statistics(session, source)
    return row["reason"] if row["status"] == "failed" else None


def source_error(session: sluice.Session, sql: str) -> sluice.SqlError:
    with pytest.raises(sluice.SqlError) as info:
        session.execute(sql)
    return info.value


@pytest.fixture
def broker(spark):
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        kafka.create_topic("t", 1)
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        yield kafka, session


def test_a_20s_outage_under_a_materialized_view_only_delays_it(broker) -> None:
    kafka, session = broker
    # The default bounds: a 20 s outage must pass without the source failing.
    session.execute("CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT")
    session.execute("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n, count(DISTINCT text) AS d FROM src")
    produce(kafka.bootstrap, "t", numbered(0, 1000))
    assert session.execute("SELECT n, d FROM mv").rows == [(1000, 1000)]
    ingestion = session.controller.running[session.catalog.current.get("src").id]
    run = ingestion.query.runId
    kafka.set_broker_down(1)
    time.sleep(20)
    kafka.set_broker_up(1)
    produce(kafka.bootstrap, "t", numbered(1000, 1000))
    assert session.execute("SELECT n, d FROM mv").rows == [(2000, 2000)]
    assert ingestion.query.runId == run  # waited out by the reader, no restart needed
    assert statistics(session, "src")["messages_read"] == 2000
    assert statistics(session, "src")["status"] == "running"


TIMED = {"type": "record", "name": "r", "fields": [{"name": "at", "type": {"type": "int", "logicalType": "time-millis"}}]}


def timed(start: int, count: int) -> list[tuple[None, bytes]]:
    """Messages of one TIME column: `start` ms, then a second more each."""
    parsed = fastavro.parse_schema(TIMED)
    return [(None, confluent_frame(1, avro_datum(parsed, {"at": start + 1000 * i}))) for i in range(count)]


def test_an_outage_past_the_bound_fails_the_source_visibly_then_it_recovers(broker) -> None:
    kafka, session = broker
    session.execute(f"CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT {SHORT_RETRY}")
    session.execute(f"CREATE SOURCE plain FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT {SHORT_RETRY}")
    session.execute("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n, count(DISTINCT text) AS d FROM src")
    # A stream over a TIME column, which Spark refuses unless the thread restarting it
    # sees sluice's settings.
    kafka.create_topic("times", 1)
    schema = json.dumps(TIMED).replace("'", "''")
    session.execute(
        f"CREATE SOURCE times FROM KAFKA CONNECTION kafka (TOPIC 'times') FORMAT AVRO USING SCHEMA '{schema}' {SHORT_RETRY}"
    )
    session.execute("CREATE MATERIALIZED VIEW latest AS SELECT count(*) AS n, max(at) AS at FROM times")
    produce(kafka.bootstrap, "t", numbered(0, 100))
    produce(kafka.bootstrap, "times", timed(0, 10))
    assert session.execute("SELECT n, d FROM mv").rows == [(100, 100)]
    assert session.execute("SELECT n, at FROM latest").rows == [(10, datetime.time(0, 0, 9))]
    kafka.set_broker_down(1)

    reason = wait_for(lambda: failed_reason(session, "src"))
    assert reason is not None and reason.startswith("topic 't': ")
    assert reason.endswith("(still failing after retrying for 2s)")
    error = source_error(session, "SELECT n FROM mv")
    assert error.code == "58000"
    assert error.message.startswith('Source error: source "src" has failed: topic \'t\': ')
    assert error.hint == "the source recovers by itself once the fault clears"

    # A snapshot of a source no stream reads waits out the bound, then names it.
    began = time.monotonic()
    error = source_error(session, "SELECT count(*) FROM plain")
    assert 2 <= time.monotonic() - began < 15
    assert error.message == (
        'Source error: source "plain" has failed: topic \'t\': failed to get metadata: '
        "broker transport failure (still failing after retrying for 2s)"
    )

    kafka.set_broker_up(1)
    produce(kafka.bootstrap, "t", numbered(100, 100))
    produce(kafka.bootstrap, "times", timed(10_000, 10))

    def recovered():
        try:
            return session.execute("SELECT n, d FROM mv").rows == [(200, 200)] and session.execute(
                "SELECT n, at FROM latest"
            ).rows == [(20, datetime.time(0, 0, 19))]
        except sluice.SqlError:
            return False

    assert wait_for(recovered), statistics(session, "times")
    assert statistics(session, "src") | {"last_error_at": None} == {
        "source": "src", "messages_read": 200, "errors": 0, "dead_lettered": 0,
        "last_error_at": None, "status": "running", "reason": None,
    }
    assert session.execute("SELECT count(*) FROM plain").rows == [(200,)]


def avro(value: int, schema_id: int) -> bytes:
    return confluent_frame(schema_id, avro_datum(fastavro.parse_schema(SCHEMA), {"n": value}))


def test_a_registry_outage_past_the_bound_fails_the_source_then_it_recovers(broker) -> None:
    kafka, session = broker
    registry = Registry({"t-value": SCHEMA})
    try:
        schema_id = registry.subjects["t-value"][0]
        session.execute(f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
        session.execute(
            "CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 't') "
            f"FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr {SHORT_RETRY}"
        )
        session.execute(
            "CREATE SOURCE plain FROM KAFKA CONNECTION kafka (TOPIC 't') "
            f"FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr {SHORT_RETRY}"
        )
        session.execute("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n, count(DISTINCT n) AS d FROM src")
        produce(kafka.bootstrap, "t", [(None, avro(i, schema_id)) for i in range(50)])
        assert session.execute("SELECT n, d FROM mv").rows == [(50, 50)]

        registry.failing = 503
        produce(kafka.bootstrap, "t", [(None, avro(i, schema_id)) for i in range(50, 100)])
        reason = wait_for(lambda: failed_reason(session, "src"))
        assert reason == (
            f"schema registry {registry.url} answered 503 for schema id "
            f"{schema_id} (still failing after retrying for 2s)"
        )
        assert source_error(session, "SELECT n FROM mv").message == (
            f'Source error: source "src" has failed: {reason}'
        )
        # A snapshot's read fails the same way, not with a decode error per message.
        assert source_error(session, "SELECT count(*) FROM plain").message == (
            f'Source error: source "plain" has failed: {reason}'
        )

        registry.failing = None
        assert wait_for(lambda: statistics(session, "src")["status"] == "running")
        assert session.execute("SELECT n, d FROM mv").rows == [(100, 100)]
        # Not one message became a decode error.
        assert session.execute("SELECT count(*) FROM ONLY ERRORS src").rows == [(0,)]
        assert session.execute("SELECT count(*), count(DISTINCT n) FROM plain").rows == [(100, 100)]
    finally:
        registry.close()


def test_an_idle_source_keeps_its_broker_connections(broker) -> None:
    kafka, session = broker
    session.execute("CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT")
    session.execute("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n FROM src")
    produce(kafka.bootstrap, "t", numbered(0, 10))
    assert session.execute("SELECT n FROM mv").rows == [(10,)]
    before = kafka.client_ports()
    time.sleep(3)  # ≈ 30 triggers, each asking the topic's offsets
    opened = kafka.client_ports() - before
    assert len(opened) <= 1, opened


def _recreatable(served: bool) -> Iterator[Recreatable]:
    topic = Recreatable(numbered(0, 100), served=served)
    try:
        yield topic
    finally:
        topic.close()


@pytest.fixture
def served_topic(spark):
    """Topic "t" of `sluice kafka serve`, re-created by restarting it on the same port."""
    yield from _recreatable(served=True)


@pytest.fixture
def in_process_topic(spark):
    """Topic "t" of an embedded broker of this process, re-created by a new one on its port."""
    yield from _recreatable(served=False)


RECREATED = "topic was recreated: high watermark of partition 0 regressed to 3, below the committed offset 100"
START_OVER = start_over_hint("src")


def assert_recreated(session: sluice.Session) -> None:
    """The source shows the recreated topic as its reason, and every read fails with it."""
    assert statistics(session, "src") | {"last_error_at": None} == {
        "source": "src", "messages_read": 100, "errors": 0, "dead_lettered": 0,
        "last_error_at": None, "status": "failed", "reason": RECREATED,
    }
    for query in ("SELECT count(*) FROM src", "SELECT n FROM mv", "SELECT count(*) FROM dlq"):
        error = source_error(session, query)
        assert (error.code, error.message, error.hint) == (
            "58000", f'Source error: source "src" has failed: {RECREATED}', START_OVER
        ), query


def created(session: sluice.Session, bootstrap: str) -> None:
    create_source(session, bootstrap)
    assert session.execute("SELECT n, first FROM mv").rows == [(100, "m0")]


def test_a_recreated_topic_fails_the_source_for_good_until_it_is_created_again(served_topic, tmp_path: Path) -> None:
    """The topic re-created as a user does it: `sluice kafka serve` stopped and started
    again on the same port."""
    with sluice.Session(tmp_path) as session:
        created(session, served_topic.bootstrap)
        served_topic.recreate(renamed(0, 3))
        # The stream notices by itself, with no statement asking, and records it for good.
        recorded = wait_for(lambda: list(tmp_path.glob("streams/*/failed.json")))
        assert [json.loads(f.read_text()) for f in recorded] == [{"reason": RECREATED}]
        # On the way it may show the new broker's topic missing for a moment.
        assert wait_for(lambda: failed_reason(session, "src") == RECREATED), statistics(session, "src")
        assert_recreated(session)

    # A restart with the data directory kept: still failed, though the new topic has by
    # now passed the old one's end (a stream reading on from offset 100 would misread it).
    produce(served_topic.bootstrap, "t", renamed(3, 200))
    with sluice.Session(tmp_path) as session:
        assert_recreated(session)
        # What the hint says to run reads the new topic from its start, all of it.
        start_over(session)
        assert session.execute("SELECT n, first FROM mv").rows == [(203, "new0")]
        assert sorted(session.execute("SELECT text FROM src").rows) == sorted((t.decode(),) for _, t in renamed(0, 203))
        assert statistics(session, "src")["status"] == "running"


def test_a_topic_recreated_while_no_session_ran_fails_the_next_one_s_first_read(in_process_topic, tmp_path: Path) -> None:
    """The next session's stream starts from committed offsets past the topic's end: the
    fault, found before the stream reads a thing, not a snapshot of the old topic's rows."""
    with sluice.Session(tmp_path) as session:
        created(session, in_process_topic.bootstrap)
    in_process_topic.recreate(renamed(0, 3))
    with sluice.Session(tmp_path) as session:
        error = source_error(session, "SELECT n FROM mv")
        assert (error.message, error.hint) == (f'Source error: source "src" has failed: {RECREATED}', START_OVER)
        assert_recreated(session)


# Without Spark: the reader and the decoder wait out a fault shorter than their bound,
# and fail with the reason past it.


def after(seconds: float, action) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_a_read_waits_out_a_short_outage_and_fails_past_the_bound(kafka) -> None:
    kafka.create_topic("t", 1)
    produce(kafka.bootstrap, "t", numbered(0, 5))
    kafka.set_broker_down(1)
    after(1.5, lambda: kafka.set_broker_up(1))
    options = Options(kafka.bootstrap, "t", {}, retry=RetryPolicy(20, 0.5, "s"))
    (batch,) = read_range(options, 0, 0, 5)
    assert batch.column("value").to_pylist() == [v for _, v in numbered(0, 5)]

    kafka.set_broker_down(1)
    began = time.monotonic()
    with pytest.raises(SourceUnavailable) as info:
        list(read_range(Options(kafka.bootstrap, "t", {}, retry=RetryPolicy(1, 0.5, "s")), 0, 0, 5))
    assert 1 <= time.monotonic() - began < 5
    assert info.value.source == "s"
    assert info.value.reason.startswith("topic 't' partition 0: no message at offset 0 (range ends at 5): ")
    assert info.value.reason.endswith("(still failing after retrying for 1s)")


def test_offsets_wait_for_a_partition_whose_leader_is_away() -> None:
    with EmbeddedKafka(brokers=2) as kafka:
        kafka.create_topic("t", 2)  # partition 1 led by broker 2
        produce(kafka.bootstrap, "t", numbered(0, 3), partition=1)
        kafka.set_broker_down(2)
        with pytest.raises(SourceUnavailable, match="^topic 't': .*unknown partition .*retrying for 1s"):
            watermarks(kafka.bootstrap, "t", {}, RetryPolicy(1, 0.5))
        after(1.0, lambda: kafka.set_broker_up(2))
        assert watermarks(kafka.bootstrap, "t", {}, RetryPolicy(20, 0.5)) == {0: (0, 0), 1: (0, 3)}


def decoder(registry: Registry, seconds: float) -> AvroDecoder:
    return AvroDecoder(json.dumps(SCHEMA), True, registry.url, retry=RetryPolicy(seconds, 0.2, "s"))


def test_the_registry_look_up_retries_transient_faults_only() -> None:
    registry = Registry({"t-value": SCHEMA})
    try:
        schema_id = registry.subjects["t-value"][0]
        message = avro(7, schema_id)
        registry.failing = 503
        after(0.5, lambda: setattr(registry, "failing", None))
        assert decoder(registry, 10).decode([message], [0]) == ([{"n": 7}], [None])

        registry.failing = 503
        with pytest.raises(SourceUnavailable, match="answered 503 .* after retrying for 0.5s"):
            decoder(registry, 0.5).decode([message], [0])
        # A refused login is no message's fault either, and no retry changes it.
        registry.failing = 401
        began = time.monotonic()
        with pytest.raises(SourceUnavailable, match=f"^source \"s\": schema registry {registry.url} answered 401"):
            decoder(registry, 10).decode([message], [0])
        assert time.monotonic() - began < 2
        registry.failing = None
        # An id the registry does not know stays that message's decode error.
        data, errors = decoder(registry, 10).decode([avro(1, 99), message], [0, 1])
        assert data == [None, {"n": 7}]
        assert errors[0].startswith("avro deserialization error: ExternalSystemError: schema id 99 not found")
    finally:
        registry.close()


def test_registry_unreachable_is_transient() -> None:
    registry = Registry({"t-value": SCHEMA})
    url = registry.url
    registry.close()
    closed = AvroDecoder(json.dumps(SCHEMA), True, url, retry=RetryPolicy(0.3, 0.1))
    with pytest.raises(SourceUnavailable, match=f"cannot reach schema registry {url}: .*retrying for 0.3s"):
        closed.decode([avro(1, 1)], [0])


def test_a_broker_dropped_during_an_outage_is_a_transient_fault_but_a_closed_client_is_not() -> None:
    # Seen under load: a watermark request in flight to a broker that left the metadata.
    assert transient(KafkaError(KafkaError._DESTROY_BROKER))
    assert not transient(KafkaError(KafkaError._DESTROY))


def test_the_reason_of_a_spark_failure_is_never_empty() -> None:
    streaming = (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
        "latestOffset: Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\n"
        "sluice.kafka.client.KafkaReadError: topic 't' does not exist\n SQLSTATE: 38000\n"
        "=== Streaming Query ===\nIdentifier: q"
    )
    def reason(text: str) -> str:
        return failure_reason(RuntimeError(text), "/d/streams/u1")

    assert reason(streaming) == "topic 't' does not exist"
    assert reason(streaming.replace("sluice.kafka.client.KafkaReadError", "KeyError")) == (
        "KeyError: topic 't' does not exist"
    )
    unavailable = str(SourceUnavailable('topic \'t\': gone', 'a "b"'))
    assert reason(f"Job aborted: Traceback (most recent call last):\n"
                  f"sluice.kafka.retry.SourceUnavailable: {unavailable}\n\tat x") == "topic 't': gone"
    assert reason("[SOME_CONDITION] it broke\nmore") == "it broke"
    assert reason("") == "RuntimeError"
    # A full disk, as Java says it (no file named: the folder written) and as Python does.
    assert reason("An error occurred while calling o7155.parquet.\nCaused by: java.io.IOException: "
                  "No space left on device\n\tat x") == 'could not write to file "/d/streams/u1": No space left on device'
    assert reason("Traceback (most recent call last):\nOSError: [Errno 28] No space left on device: "
                  "'/d/streams/u1/commits/3.json'\n") == (
        'could not write to file "/d/streams/u1/commits/3.json": No space left on device'
    )
    assert reason("java.io.FileNotFoundException: /d/streams/u1/batch-1/out/part-0.parquet (No space left on "
                  "device)") == 'could not write to file "/d/streams/u1/batch-1/out/part-0.parquet": No space left on device'
    # Spark failing to start a Python worker in time is told in sluice's words, however wrapped.
    late = "org.apache.spark.SparkException: Python worker failed to connect back.\n\tat org.apache.spark.api"
    assert reason(f"[STREAM_FAILED] Query [id = 1] terminated: {late}") == WORKER_LATE
    assert reason("Timed out while waiting for the Python worker to connect back") == WORKER_LATE


class FakeClock:
    """`time` for `sluice.kafka.retry`: sleeping moves it on, nothing else does."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


@given(
    timeout=st.floats(0, 120),
    delay_max=st.floats(0.01, 30),
    outage=st.floats(0, 240),
)
def test_an_outage_within_the_bound_is_waited_out_and_noticed_within_the_delay_max(
    timeout, delay_max, outage
) -> None:
    clock = FakeClock()
    attempts = []

    def attempt(seconds: float) -> float:
        assert retry.ATTEMPT_SECONDS[0] <= seconds <= retry.ATTEMPT_SECONDS[1]
        attempts.append(clock.now)
        if clock.now < outage:
            raise TransientFault("broker down")
        return clock.now

    original = retry.time
    retry.time = clock
    try:
        policy = RetryPolicy(timeout, delay_max, "s")
        if outage <= timeout:
            assert 0 <= policy.call(attempt, "topic 't'") - outage <= delay_max
        else:
            with pytest.raises(SourceUnavailable) as info:
                policy.call(attempt, "topic 't'")
            assert clock.now == pytest.approx(timeout)  # gave up at the bound, not later
            assert info.value.reason.startswith("topic 't': broker down")
    finally:
        retry.time = original
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert all(gap <= delay_max + 1e-9 for gap in gaps)
    # Growing (to float noise of the fake clock); the last may be cut short by the bound.
    assert all(a <= b + 1e-9 for a, b in zip(gaps[:-1], gaps[1:-1]))


@given(source=st.text(min_size=1), reason=st.text().map(lambda t: t.replace("\n", " ").strip()))
def test_a_read_failure_is_found_again_in_any_spark_text_around_it(source, reason) -> None:
    raised = SourceUnavailable(reason, source)
    text = f"Job aborted: Traceback (most recent call last):\n  File 'x'\nsluice.kafka.retry.SourceUnavailable: {raised}\n\tat y"
    assert reason_of(text) == (source, reason)


def test_a_range_past_the_partition_s_end_fails_as_offsets_gone_back(kafka) -> None:
    kafka.create_topic("t", 1)
    produce(kafka.bootstrap, "t", numbered(0, 10))
    options = Options(kafka.bootstrap, "t", {}, retry=RetryPolicy(5, 0.5, "s"))
    with pytest.raises(OffsetsRegressed) as info:
        list(read_range(options, 0, 50, 60))
    assert str(info.value) == (
        "topic was recreated: high watermark of partition 0 regressed to 10, below offset 50 of the range being read"
    )


def test_a_stream_fails_when_its_topic_ends_below_what_it_committed_not_below_its_start(kafka) -> None:
    kafka.create_topic("t", 1)
    produce(kafka.bootstrap, "t", numbered(0, 3))

    def reader(start: int, committed: int) -> KafkaStreamReader:
        return KafkaStreamReader(
            {
                "bootstrap": kafka.bootstrap,
                "topic": "t",
                "retry": RetryPolicy(5, 0.5, "s").to_json(),
                "start_offsets": json.dumps({"0": start}),
                "committed": json.dumps({"0": committed}),
            }
        )

    gone_back = reader(100, 100)
    with pytest.raises(OffsetsRegressed) as info:
        gone_back.latestOffset({"0": 100}, ReadAllAvailable())
    gone_back.stop()
    assert str(info.value) == (
        "topic was recreated: high watermark of partition 0 regressed to 3, below the committed offset 100"
    )
    # A START OFFSET past the topic's end, nothing read yet: the stream waits for it.
    ahead = reader(50, 0)
    assert ahead.latestOffset({"0": 50}, ReadAllAvailable()) == {"0": 3}
    # Later starts are the ends of batches, committed: one past the topic's end is the fault.
    assert ahead.latestOffset({"0": 3}, ReadAllAvailable()) == {"0": 3}
    with pytest.raises(OffsetsRegressed):
        ahead.latestOffset({"0": 4}, ReadAllAvailable())
    ahead.stop()


@given(
    committed=st.dictionaries(st.integers(0, 3), st.integers(0, 1000), min_size=1),
    moved=st.dictionaries(st.integers(0, 3), st.integers(-1000, 1000)),
)
def test_offsets_go_back_exactly_when_a_partition_ends_below_its_committed_offset(committed, moved) -> None:
    highs = {p: max(offset + moved.get(p, 0), 0) for p, offset in committed.items()}
    reason = regression(committed, highs)
    behind = sorted(p for p, offset in committed.items() if highs[p] < offset)
    if not behind:
        assert reason is None
    else:
        p = behind[0]
        assert reason == (
            f"topic was recreated: high watermark of partition {p} regressed to {highs[p]}, "
            f"below the committed offset {committed[p]}"
        )
    gone = {p: o for p, o in committed.items() if o > 0}
    if gone:
        lost = max(gone)
        fewer = {p: h for p, h in highs.items() if p != lost}
        assert regression(committed, fewer) == (
            f"topic was recreated: partition count regressed from {max(committed) + 1} to {len(fewer)}"
        )
