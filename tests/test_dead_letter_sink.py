"""Dead-letter sinks: every row of a dead-letter table is one message of the sink's topic
in Kafka Connect's DLQ format — the bad message's own key, value and headers, then
Connect's context headers — exactly once, also across sessions killed (SIGKILL) while
they ingest and sink, and killed in the middle of a large step's transaction (read as
sluice's read_committed reader reads it: the embedded broker shows the killed
transaction's messages to its own read_committed consumers)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.kafka.consume import read_committed
from sluice.kafka.embedded import EmbeddedKafka
from sluice.storage.sink.changes import Change, Message
from sluice.storage.sink.dead_letter import DeadLetters, context_headers
from tests.support.dead_letters import CHILD, Produced, children_broker, killed_mid_transaction, open_session, sunk
from tests.support.store_faults import kill_rounds

ROW = st.tuples(
    st.none() | st.binary(max_size=8),  # key
    st.none() | st.binary(max_size=8),  # value
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=3),  # headers
    st.text(max_size=12),  # error
)
FRAME = "error string, partition int, offset long, key binary, value binary, headers array<struct<key:string,value:binary>>"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, max_size=6))
def test_each_dead_letter_row_becomes_its_message_with_any_bytes_and_headers(spark, rows) -> None:
    frame = spark.createDataFrame(
        [(error, 1, offset, key, value, headers) for offset, (key, value, headers, error) in enumerate(rows)], FRAME
    )
    envelope = DeadLetters("t", "src")
    shaped = frame.select(*envelope.shape(frame)).collect()
    messages = [m for identity, payload in shaped for m in envelope.messages(Change(bytes(identity), None, bytes(payload)))]
    assert messages == [
        Message(key, value, tuple(headers) + context_headers("t", 1, offset, "src", error))
        for offset, (key, value, headers, error) in enumerate(rows)
    ]
    assert len({bytes(identity) for identity, _ in shaped}) == len(rows)


def test_a_dead_letter_sink_writes_each_bad_message_once_with_its_headers(spark, tmp_path) -> None:
    with EmbeddedKafka() as kafka:
        kafka.create_topic("n", 2)
        produced = Produced(kafka.bootstrap, seed=1)
        produced.more(16)
        with open_session(tmp_path / "data", kafka.bootstrap) as session:
            session.execute("SELECT count(*) FROM dlq")
            session.drain_sinks(120)
            assert sunk(kafka.bootstrap, len(produced.dead_letters())) == produced.dead_letters()
            produced.more(10)  # later dead-letter rows are sent after, once
            session.execute("SELECT count(*) FROM dlq")
            session.drain_sinks(120)
            assert sunk(kafka.bootstrap, len(produced.dead_letters())) == produced.dead_letters()


# One kill round by default; the long tier kills three sessions in turn.
@pytest.mark.parametrize("rounds", [1, pytest.param(3, marks=pytest.mark.long)])
def test_killed_sessions_sink_every_dead_letter_exactly_once(spark, tmp_path, rounds) -> None:
    data_dir = tmp_path / "data"
    with children_broker(3, 20) as (kafka, produced):
        kill_rounds(data_dir, produced, rounds, random.Random(3), tmp_path / "child.log", CHILD)
        assert read_committed(kafka.bootstrap, "dead", 1, 5), "the killed sessions sank nothing"
        produced.more(10)
        with open_session(data_dir, kafka.bootstrap) as reopened:
            reopened.execute("SELECT count(*) FROM dlq")
            reopened.drain_sinks(120)
            expected = produced.dead_letters()
            got = sunk(kafka.bootstrap, len(expected))
    assert len(got) == len(expected), (len(got), len(expected))
    assert got == expected


# One session killed by default; the long tier kills five in turn, each redoing the step.
@pytest.mark.parametrize("kills", [1, pytest.param(5, marks=pytest.mark.long)])
def test_sessions_killed_mid_transaction_sink_every_dead_letter_exactly_once(spark, tmp_path, kills) -> None:
    outcome = killed_mid_transaction(tmp_path, kills)
    assert len(outcome.got) == len(outcome.expected), (len(outcome.got), len(outcome.expected))
    assert outcome.got == outcome.expected
    assert outcome.reported == ("running", len(outcome.expected))
    # The killed transactions' messages are in the log, and a read_committed consumer of
    # the embedded broker returns them: counting those would count dead letters twice.
    assert outcome.in_log > len(outcome.expected), (outcome.in_log, len(outcome.expected))
