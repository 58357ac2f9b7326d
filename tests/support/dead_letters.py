"""The dead-letter sink's scenario, shared by tests/test_dead_letter_sink.py and
bench/fault_sink.py: a source redirecting bad messages of topic `n` to the dead-letter
table `dlq`, sunk to topic `dead`; messages produced with headers, and the dead letters
the topic must then hold; sessions killed (SIGKILL) in the middle of a step's transaction
(`dead_letter_sink_child.py`)."""

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

import sluice
from sluice.kafka.client import watermarks
from sluice.kafka.consume import read_committed
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.topics import ControlServer
from sluice.storage.sink.dead_letter import context_headers
from tests.support.sinks import read_all
from tests.support.store_faults import ROOT

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
