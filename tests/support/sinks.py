"""Reading a sink's topic back as a consumer with `isolation.level=read_committed` does:
what a transactional sink committed, nothing of what it aborted — on the embedded broker,
whose consumers see aborted transactions too, through sluice's filter by the sinks'
progress records (`kafka/consume.py`'s `SinkCommits`), as `sluice kafka consume` reads it.
And a broker outage in the middle of a sink's step (`outage_case`), which
tests/test_sink_progress.py and bench/fault_sink.py measure."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

import sluice
from sluice.kafka.client import consumer, watermarks
from sluice.kafka.consume import SinkCommits
from sluice.storage.sink import delivery as sink


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


@contextlib.contextmanager
def outage(kafka, after: int, seconds: float, timeout_ms: int) -> Iterator[threading.Event]:
    """While inside, sinks' transactions time out after `timeout_ms`, and once a step has
    written `after` messages and they are acknowledged (in the log, in a transaction that
    cannot commit now) the broker is set down, and up again `seconds` later; the event is
    set when it is up again."""
    produce_one, timeout = sink.Delivery._produce, sink.TRANSACTION_TIMEOUT_MS
    written, over = [], threading.Event()

    def produced(delivery, topic, message, on_delivery):
        produce_one(delivery, topic, message, on_delivery)
        written.append(1)
        if len(written) == after:
            delivery.producer.flush(30)
            kafka.set_broker_down(1)
            threading.Timer(seconds, lambda: (kafka.set_broker_up(1), over.set())).start()

    sink.Delivery._produce, sink.TRANSACTION_TIMEOUT_MS = produced, timeout_ms
    try:
        yield over
    finally:
        sink.Delivery._produce, sink.TRANSACTION_TIMEOUT_MS = produce_one, timeout


@dataclass(frozen=True)
class Outcome:
    rows: int  # rows the sink's table holds
    reported: int  # rows SHOW SINKS says were written
    committed: Counter  # how many times each key is there, as sluice reads the topic
    in_log: int  # messages in the embedded broker's log, aborted ones included


def outage_case(kafka, data_dir: Path, rows: int, after: int, seconds: float, timeout_ms: int) -> Outcome:
    """An UPSERT sink of a `rows`-row table through an outage of `seconds` once `after`
    messages of its first step are written, its transactions timing out after
    `timeout_ms`."""
    with outage(kafka, after, seconds, timeout_ms) as over, sluice.Session(data_dir) as session:
        values = ", ".join(f"({a}, 'row {a}')" for a in range(rows))
        session.execute_script(
            f"""
            CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
            CREATE TABLE t (a int, b text);
            INSERT INTO t VALUES {values};
            CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
            """
        )
        assert over.wait(600), "the step never reached the outage"
        session.drain_sinks(600)
        (row,) = session.execute("SHOW SINKS").rows
        assert row[3] == "running", row
        committed = Counter(key for key, _ in read_committed(kafka.bootstrap, "out"))
        return Outcome(rows, row[4], committed, len(read_all(kafka.bootstrap, "out")))
