"""Streams outlive transient faults (KIP-298's retry): an outage shorter than a source's
RETRY TIMEOUT only delays its results; past it the source shows itself failed, with the
reason, in SHOW SOURCE STATISTICS and in every query's error, and it recovers by itself
once the fault clears — nothing lost, nothing duplicated. Real Spark, the embedded broker
(`set_broker_down/up`) and a real schema registry server (tests/registry.py)."""

from __future__ import annotations

import datetime
import json
import threading
import time

import fastavro
import pytest
from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st

import sluice
from sluice.kafka.client import transient, watermarks
from sluice.kafka.decode import AvroDecoder
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.encode import avro_datum, confluent_frame
from sluice.kafka.reader import Options, read_range
from sluice.kafka import retry
from sluice.kafka.retry import RetryPolicy, SourceUnavailable, TransientFault, reason_of
from sluice.render.failures import failure_reason
from tests.registry import Registry

SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}]}
# Small bounds, so a fault outlasts them in seconds.
SHORT_RETRY = "WITH (RETRY TIMEOUT = '2s', RETRY DELAY MAX = '500ms')"


def numbered(start: int, count: int) -> list[tuple[None, bytes]]:
    return [(None, b"m%d" % i) for i in range(start, start + count)]


def wait_for(condition, seconds: float = 60.0, every: float = 0.5):
    """`condition()`'s first truthy value, asked until `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def statistics(session: sluice.Session, source: str) -> dict:
    result = session.execute(f"SHOW SOURCE STATISTICS FOR {source}")
    (row,) = result.rows
    return dict(zip(result.columns, row))


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
    ingestion = session._live.running[session.catalog.current.get("src").id]
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
