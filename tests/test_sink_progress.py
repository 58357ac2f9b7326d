"""Sinks' progress records on the embedded broker: a broker away for longer than the
transaction's timeout in the middle of a step (every row once, as many rows reported as
the topic holds), a progress topic whose older records are gone and that holds many
records after a sink's last (a restart sends nothing again and reads only the topic's
end), and the progress topic's configuration check."""

from __future__ import annotations

from collections import Counter

import pytest

import sluice
from sluice.errors import ExternalSystemError
from sluice.kafka.client import watermarks
from sluice.kafka.embedded import produce
from sluice.kafka.progress import PROGRESS_CONFIG, PROGRESS_TOPIC, check_config, last_record
from sluice.kafka.topics import topic_config
from tests.support.sinks import outage_case, read_all

DRAIN_SECONDS = 300


def _rows_reported(session: sluice.Session) -> int:
    (row,) = session.execute("SHOW SINKS").rows
    assert row[3] == "running", row
    return row[4]


@pytest.mark.parametrize(
    ("timeout_ms", "outage_seconds"),
    [(3_000, 6.0), pytest.param(60_000, 75.0, marks=pytest.mark.long)],
    ids=["3 s timeout", "60 s timeout"],
)
def test_an_outage_longer_than_the_transaction_timeout_loses_and_repeats_nothing(
    spark, kafka, tmp_path, timeout_ms, outage_seconds
) -> None:
    got = outage_case(kafka, tmp_path / "data", 3_000, 1_000, outage_seconds, timeout_ms)
    assert got.committed == Counter(b'{"a":%d}' % i for i in range(got.rows)), "a row lost or written twice"
    assert got.reported == got.rows
    # The aborted step's acknowledged messages are still in the embedded broker's log,
    # shown to its read_committed consumers: counting them would count rows twice.
    assert got.in_log >= got.rows + 1_000


def test_a_restart_reads_the_last_record_alone_and_sends_nothing_again(spark, kafka, tmp_path) -> None:
    data_dir = tmp_path / "data"
    with sluice.Session(data_dir) as session:
        session.execute_script(
            f"""
            CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
            CREATE TABLE t (a int);
            INSERT INTO t VALUES (1);
            CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
            """
        )
        session.drain_sinks(DRAIN_SECONDS)
        # Other sinks' records past the embedded broker's 5 MiB a partition: the sink's
        # first record is deleted from the progress topic (its low watermark moves up).
        produce(kafka.bootstrap, PROGRESS_TOPIC, [(b"another sink", b"x" * 100_000)] * 60)
        session.execute("INSERT INTO t VALUES (2)")
        session.drain_sinks(DRAIN_SECONDS)
        assert _rows_reported(session) == 2
    low, _ = watermarks(kafka.bootstrap, PROGRESS_TOPIC, {})[0]
    assert low > 0, "the first record is still there"
    # Many records of other sinks after this one's last.
    produce(kafka.bootstrap, PROGRESS_TOPIC, [(b"another sink", b"{}")] * 3_000)
    sent = read_all(kafka.bootstrap, "out")
    with sluice.Session(data_dir) as reopened:
        reopened.drain_sinks(DRAIN_SECONDS)
        assert _rows_reported(reopened) == 2
        reopened.execute("INSERT INTO t VALUES (3)")
        reopened.drain_sinks(DRAIN_SECONDS)
        assert _rows_reported(reopened) == 3
    assert [m.value() for m in read_all(kafka.bootstrap, "out")] == [m.value() for m in sent] + [b'{"a":3}']


class Counting:
    """A consumer that counts the messages it returns."""

    def __init__(self, consumer) -> None:
        self.consumer = consumer
        self.returned = 0

    def poll(self, timeout):
        message = self.consumer.poll(timeout)
        if message is not None and message.error() is None:
            self.returned += 1
        return message

    def __getattr__(self, name):
        return getattr(self.consumer, name)


def test_the_last_record_is_found_without_reading_the_topic(kafka) -> None:
    from confluent_kafka import Consumer

    kafka.create_topic(PROGRESS_TOPIC, 1)
    produce(kafka.bootstrap, PROGRESS_TOPIC, [(b"sink", b'{"version": %d}' % v) for v in range(1, 4)])
    produce(kafka.bootstrap, PROGRESS_TOPIC, [(b"another sink", b"{}")] * 20_000)
    produce(kafka.bootstrap, PROGRESS_TOPIC, [(b"sink", b'{"version": 4}')])
    produce(kafka.bootstrap, PROGRESS_TOPIC, [(b"another sink", b"{}")] * 100)
    consumer = Counting(
        Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g", "enable.partition.eof": True})
    )
    try:
        found, offset = last_record(consumer, b"sink")
        assert (found.version, offset) == (4, 20_003)
        assert consumer.returned <= 16 + 64 + 256, consumer.returned  # three windows at most
        assert last_record(consumer, b"no such sink") is None
    finally:
        consumer.close()


def test_a_progress_topic_that_is_not_compacted_is_an_error_naming_the_setting(kafka) -> None:
    # The embedded broker keeps no topic configuration: nothing to check there.
    kafka.create_topic(PROGRESS_TOPIC, 1)
    assert topic_config(kafka.bootstrap, PROGRESS_TOPIC) is None
    # What a real broker describes for a topic made with its defaults, and for sluice's.
    with pytest.raises(ExternalSystemError) as e:
        check_config({"cleanup.policy": "delete", "retention.ms": "604800000"})
    assert e.value.message == (
        "progress topic '_sluice-progress' has cleanup.policy=delete: it must be compact, or a sink's progress"
        " expires with the topic's retention and the sink sends its whole relation again"
    )
    with pytest.raises(ExternalSystemError) as e:
        check_config({"cleanup.policy": "compact,delete", "retention.ms": "604800000"})
    assert e.value.message == (
        "progress topic '_sluice-progress' has retention.ms=604800000 with cleanup.policy=compact,delete:"
        " retention.ms must be -1, or a sink's progress expires and the sink sends its whole relation again"
    )
    check_config(dict(PROGRESS_CONFIG))
    check_config({"cleanup.policy": "compact", "retention.ms": "604800000"})  # compaction alone deletes nothing by age
