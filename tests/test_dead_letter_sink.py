"""Dead-letter sinks: every row of a dead-letter table is one message of the sink's topic
in Kafka Connect's DLQ format — the bad message's own key, value and headers, then
Connect's context headers — exactly once, also across sessions killed (SIGKILL) while
they ingest and sink, and killed in the middle of a large step's transaction (read as
sluice's read_committed reader reads it: the embedded broker shows the killed
transaction's messages to its own read_committed consumers)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.client import watermarks
from sluice.kafka.consume import read_committed
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.topics import ControlServer
from sluice.storage.sink.changes import Change, Message
from sluice.storage.sink.dead_letter import DeadLetters, context_headers
from tests.sinks import read_all
from tests.store_faults import ROOT, kill_rounds

CHILD = Path(__file__).resolve().parent / "dead_letter_sink_child.py"
SCRIPT = """
    CREATE CONNECTION kafka TO KAFKA (BROKER '{bootstrap}');
    CREATE SOURCE n FROM KAFKA CONNECTION kafka (TOPIC 'n') FORMAT TEXT WITH (REDIRECT ERRORS = dlq);
    CREATE SINK dead FROM dlq INTO KAFKA CONNECTION kafka (TOPIC 'dead');
"""
BAD = b"\xff"
ERROR = 'Decode error: Failed to decode UTF-8 (original bytes: "ff")'


def open_session(data_dir: Path, bootstrap: str) -> sluice.Session:
    create = not (data_dir / "catalog.json").exists()
    session = sluice.Session(data_dir)
    if create:
        session.execute_script(SCRIPT.format(bootstrap=bootstrap))
    return session


@dataclass(frozen=True)
class Sent:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


class Produced:
    """Messages to topic `n`, some of them bad, each with a header of its own."""

    def __init__(self, bootstrap: str, seed: int) -> None:
        self.bootstrap = bootstrap
        self.rng = random.Random(seed)
        self.sent: list[Sent] = []

    def more(self, count: int) -> None:
        rng = self.rng
        for partition in (0, 1):
            start = watermarks(self.bootstrap, "n", {})[partition][1]
            batch = []
            for i in range(count // 2):
                key = rng.choice([b"a", b"b", None])
                value = rng.choice([b"x", BAD])
                headers = (("seq", b"%d" % (len(self.sent) + len(batch))),) + rng.choice([(), (("h", b"\x00\xfe"),)])
                batch.append(Sent(partition, start + i, key, value, headers))
            produce(self.bootstrap, "n", [(s.key, s.value, list(s.headers)) for s in batch], partition=partition)
            self.sent += batch

    def dead_letters(self) -> list[tuple]:
        """What the sink's topic must hold, one message per bad message."""
        return sorted((
            (s.key, s.value, s.headers + context_headers("n", s.partition, s.offset, "n", ERROR))
            for s in self.sent
            if s.value == BAD
        ), key=repr)


def sunk(bootstrap: str, at_least: int) -> list[tuple]:
    messages = read_committed(bootstrap, "dead", at_least, 60)
    return sorted(((m.key(), m.value(), tuple(m.headers() or ())) for m in messages), key=repr)


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


@contextlib.contextmanager
def children_broker(seed: int, count: int) -> Iterator[tuple[EmbeddedKafka, Produced]]:
    """An embedded broker whose control socket lets child sessions create topics, with
    `count` messages produced to the two partitions of `n`."""
    with EmbeddedKafka() as kafka:
        control = ControlServer(kafka.bootstrap, kafka.create_topic)
        try:
            kafka.create_topic("n", 2)
            produced = Produced(kafka.bootstrap, seed=seed)
            produced.more(count)
            yield kafka, produced
        finally:
            control.close()


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


@dataclass(frozen=True)
class KilledMidTransaction:
    expected: list[tuple]  # the dead letters the topic must hold, each once
    got: list[tuple]  # the topic's messages as sluice's read_committed reader reads them
    in_log: int  # messages in the embedded broker's log, aborted ones included
    reported: tuple  # SHOW SINKS's status and rows written


def killed_mid_transaction(work: Path, kills: int) -> KilledMidTransaction:
    """A dead-letter sink's sessions, `kills` in turn, each killed (SIGKILL) in the middle
    of a step's transaction once it has written 600 messages and they are acknowledged;
    then a session reopened on the data directory delivers the rest."""
    work.mkdir(parents=True, exist_ok=True)
    data_dir = work / "data"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    with children_broker(5, 4_000) as (kafka, produced):
        for _ in range(kills):
            with open(work / "child.log", "a") as errors:
                child = subprocess.run(
                    [sys.executable, str(CHILD), str(data_dir), kafka.bootstrap, "600"],
                    stdout=subprocess.PIPE, stderr=errors, env=env, text=True, timeout=600,
                )
            assert child.returncode == -signal.SIGKILL, (child.returncode, (work / "child.log").read_text()[-3000:])
        with open_session(data_dir, kafka.bootstrap) as reopened:
            reopened.execute("SELECT count(*) FROM dlq")
            reopened.drain_sinks(300)
            (row,) = reopened.execute("SHOW SINKS").rows
            expected = produced.dead_letters()
            got = sunk(kafka.bootstrap, len(expected))
            return KilledMidTransaction(expected, got, len(read_all(kafka.bootstrap, "dead")), row[3:5])


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
