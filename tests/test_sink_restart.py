"""Exactly once across kill -9: a sink's session is killed (SIGKILL of its process) at
random points while messages arrive and the sink writes them; reopened, it resumes from
its last committed progress. Read with read_committed, the topic holds every message of
the append-only source exactly once — nothing lost, nothing written twice."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

import sluice
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.topics import ControlServer
from tests.support.sinks import read_committed
from tests.support.store_faults import data_root, kill_rounds

CHILD = Path(__file__).resolve().parent / "sink_child.py"


class Appended:
    """Distinct messages appended to the topic `in`: `m0`, `m1`, …"""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.values: list[bytes] = []

    def more(self, count: int) -> None:
        batch = [f"m{len(self.values) + i}".encode() for i in range(count)]
        produce(self.bootstrap, "in", [(None, m) for m in batch])
        self.values.extend(batch)


# One kill round by default; the long tier kills three sessions in turn.
@pytest.mark.parametrize("rounds", [1, pytest.param(3, marks=pytest.mark.long)])
def test_killed_sink_sessions_deliver_every_change_once(spark, tmp_path, rounds) -> None:
    data_dir = tmp_path / "data"
    with EmbeddedKafka() as kafka:
        control = ControlServer(kafka.bootstrap, kafka.create_topic)  # the child creates topics
        try:
            kafka.create_topic("in", 1)
            produced = Appended(kafka.bootstrap)
            produced.more(5)
            kill_rounds(data_dir, produced, rounds, random.Random(16), tmp_path / "child.log", CHILD)
            produced.more(3)
            with sluice.Session(data_dir) as reopened:
                reopened.drain_sinks(300)
                assert reopened.execute("SHOW SINKS").rows[0][3] == "running"
                written = Counter(key for key, _ in read_committed(kafka.bootstrap, "out"))
        finally:
            control.close()
    expected = Counter(b'{"text":"' + m + b'"}' for m in produced.values)
    assert written - expected == Counter(), "written twice (or never produced)"
    assert expected - written == Counter(), "lost"
    (state,) = (data_root(data_dir) / "sinks").glob("*/state/*")  # older states removed
    assert (state / "complete").exists()
