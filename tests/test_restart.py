"""Restart: a session is killed (SIGKILL of its process) while its materialized view is
ingesting; reopened on the same data directory, the view resumes from its checkpoint and
upsert state and equals the reference model and the batch SELECT — nothing lost, nothing
duplicated."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import sluice
from sluice.kafka.embedded import EmbeddedKafka
from tests.test_streaming import KEYS, VALUES, send, shown
from tests.upsert_model import upsert

ROOT = Path(__file__).resolve().parent.parent


def test_killed_session_resumes_from_its_checkpoint(spark, tmp_path) -> None:
    rng = random.Random(7)

    def pairs(n: int):
        return [(rng.choice(KEYS), rng.choice(VALUES)) for _ in range(n)]

    data_dir = tmp_path / "data"
    with EmbeddedKafka() as kafka:
        kafka.create_topic("t", 2)
        sent = send(kafka.bootstrap, "t", pairs(200))
        child = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "restart_child.py"), str(data_dir), kafka.bootstrap],
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / "child.log", "w"),
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])},
            text=True,
        )
        try:
            assert child.stdout.readline().strip() == "ready", (tmp_path / "child.log").read_text()[-3000:]
            for _ in range(6):  # keep the stream busy, then kill it mid-flight
                sent += send(kafka.bootstrap, "t", pairs(100))
                time.sleep(0.4)
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        sent += send(kafka.bootstrap, "t", pairs(50))
        commits = sorted((data_dir / "streams").glob("*/commits/*.json"))
        assert commits, "the killed session committed nothing before it died"

        rows, errors = upsert(sent, inline=True)
        with sluice.Session(data_dir) as reopened:
            assert shown(reopened, "mv", inline=True) == rows
            got_errors = {m for (m,) in reopened.execute("SELECT message FROM ONLY ERRORS s").rows}
            assert got_errors == errors
        with sluice.Session() as batch:
            batch.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
            batch.execute(
                "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT "
                "VALUE FORMAT JSON ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE)"
            )
            assert shown(batch, "IGNORE ERRORS s", inline=True) == rows
