"""Exactly once across kill -9: a sink's session is killed (SIGKILL of its process) at
random points while messages arrive and the sink writes them; reopened, it resumes from
its last committed progress. Read with read_committed, the topic holds every message of
the append-only source exactly once — nothing lost, nothing written twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import sluice
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.topics import ControlServer
from tests.sinks import read_committed

CHILD = Path(__file__).resolve().parent / "sink_child.py"
ROOT = CHILD.parent.parent
ROUNDS = 3


def test_killed_sink_sessions_deliver_every_change_once(spark, tmp_path) -> None:
    rng = random.Random(16)
    data_dir, log = tmp_path / "data", tmp_path / "child.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    produced: list[bytes] = []

    def more(count: int) -> None:
        batch = [f"m{len(produced) + i}".encode() for i in range(count)]
        produce(kafka.bootstrap, "in", [(None, m) for m in batch])
        produced.extend(batch)

    with EmbeddedKafka() as kafka:
        control = ControlServer(kafka.bootstrap, kafka.create_topic)  # the child creates topics
        try:
            kafka.create_topic("in", 1)
            more(5)
            for _ in range(ROUNDS):
                with open(log, "a") as errors:
                    child = subprocess.Popen(
                        [sys.executable, str(CHILD), str(data_dir), kafka.bootstrap],
                        stdout=subprocess.PIPE, stderr=errors, env=env, text=True,
                    )
                try:
                    assert child.stdout.readline().strip() == "ready", log.read_text()[-3000:]
                    deadline = time.monotonic() + rng.uniform(1.0, 4.0)
                    while time.monotonic() < deadline:
                        more(rng.randint(1, 10))
                        time.sleep(rng.uniform(0, 0.3))
                finally:
                    child.send_signal(signal.SIGKILL)
                    child.wait()
            more(3)
            with sluice.Session(data_dir) as reopened:
                reopened.drain_sinks(300)
                assert reopened.execute("SHOW SINKS").rows[0][3] == "running"
                written = Counter(key for key, _ in read_committed(kafka.bootstrap, "out"))
        finally:
            control.close()
    expected = Counter(b'{"text":"' + m + b'"}' for m in produced)
    assert written - expected == Counter(), "written twice (or never produced)"
    assert expected - written == Counter(), "lost"
    assert len(list((data_dir / "sinks").glob("*/state/*.arrow"))) == 1  # older states removed
