"""How sluice runs its Spark session, each test in a child process of its own (a fresh
JVM, `tests/spark_child.py`): a local session listens on loopback only, and Spark
failing to start a Python worker within its fixed 10 s — made to happen for real, by
pointing PYSPARK_PYTHON at a script that sleeps past the limit — is waited out within a
source's RETRY TIMEOUT, past which the failure is told in sluice's words."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sluice.spark.failures import WORKER_LATE

SRC = str(Path(__file__).parents[1] / "src")
ROOT = str(Path(__file__).parents[1])


class Child:
    """A session in `tests/spark_child.py`, spoken to a statement a line."""

    def __init__(self, bootstrap: str, **env: str) -> None:
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, ROOT]),
            "SLUICE_TEST_BROKER": bootstrap,
            **env,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.spark_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=ROOT,
        )

    def ask(self, line: str) -> dict:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "the child ended"
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(120)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value.encode())
    producer.flush()


def listening(pid: int) -> set[str]:
    """The local addresses (`host:port`) the process listens on (TCP), as `ss` shows them,
    an IPv4 address on a dual-stack socket (`[::ffff:127.0.0.1]`) as IPv4's."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]
    return {re.sub(r"^\[::ffff:([\d.]+)\]:", r"\1:", address) for address in found}


@pytest.mark.spark
def test_a_local_session_listens_on_loopback_only(kafka) -> None:
    child = Child(kafka.bootstrap)
    try:
        assert child.ask("SELECT 1 + 1") == {"rows": [[2]]}  # Spark runs
        info = child.ask("INFO")
        addresses = listening(info["jvm"])
        # The driver's RPC, its block manager and the web UI, at least.
        assert len(addresses) >= 3, addresses
        assert {a.rsplit(":", 1)[0] for a in addresses} == {"127.0.0.1"}, addresses
        ui_port = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", info["ui"]).group(1)
        assert f"127.0.0.1:{ui_port}" in addresses
    finally:
        child.close()


SLOW_PYTHON = """#!/bin/sh
# Python as Spark starts it; a start whose arguments hold the text of the file `match`
# first sleeps past Spark's 10 s connect-back limit while the file `slow` counts more.
dir={dir}
case "$*" in *"$(cat "$dir/match")"*)
  echo "$*" >> "$dir/started"
  n=$(cat "$dir/slow")
  if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$dir/slow"; sleep 12; fi;;
esac
exec {python} "$@"
"""
STREAM_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
PLANNER = "pyspark.sql.worker.plan_data_source_read"


def slow_starts(folder: Path, match: str, count: int) -> None:
    (folder / "match").write_text(match)
    (folder / "slow").write_text(str(count))
    (folder / "started").write_text("")


def starts(folder: Path) -> int:
    return len((folder / "started").read_text().splitlines())


def slow_python(folder: Path) -> dict[str, str]:
    """The environment of a child whose Python workers start through `SLOW_PYTHON`, in
    `folder`, sleeping through no start yet."""
    python = folder / "python"
    python.write_text(SLOW_PYTHON.format(dir=folder, python=sys.executable))
    python.chmod(0o755)
    slow_starts(folder, "-nothing-", 0)
    return {"PYSPARK_PYTHON": str(python)}


@pytest.mark.spark
def test_a_stream_late_to_start_is_waited_out_then_told_in_sluices_words(kafka, tmp_path) -> None:
    for topic in ("late", "never"):
        kafka.create_topic(topic)
    child = Child(kafka.bootstrap, **slow_python(tmp_path), SLUICE_CATCH_UP_TIMEOUT="300")
    try:
        # A stream whose source's worker is late at every start: a statement waiting for it
        # fails once that has lasted the source's RETRY TIMEOUT, in sluice's words.
        slow_starts(tmp_path, STREAM_RUNNER, 1000)
        child.ask("CREATE SOURCE never FROM KAFKA CONNECTION kafka (TOPIC 'never') FORMAT TEXT WITH (RETRY TIMEOUT = '15s')")
        child.ask("CREATE MATERIALIZED VIEW never_all AS SELECT text FROM never")
        # Statements answer from what is committed while the fault is younger than the
        # RETRY TIMEOUT (nothing is produced: a restart's backlog job, which needs no
        # streaming worker, would commit it and answer), then fail in sluice's words.
        answer, deadline = {"rows": [[0]]}, time.monotonic() + 180
        while answer == {"rows": [[0]]} and time.monotonic() < deadline:
            time.sleep(2)
            answer = child.ask("SELECT count(*) FROM never_all")
        assert answer == {
            "error": f'Source error: source "never" has failed: {WORKER_LATE} (still failing after retrying for 15s)',
            "code": "58000",
        }
        assert starts(tmp_path) >= 1  # restarts too, unless one was still starting at the bound
        child.ask("DROP SOURCE never CASCADE")

        # A stream whose source's worker is late at its first two starts: the statement
        # waiting for it gets its rows once the stream has been restarted (its restart
        # commits them first, as a backlog: the stream could not, stuck in its first start).
        # Its RETRY TIMEOUT leaves room for a loaded machine's own late starts besides.
        slow_starts(tmp_path, STREAM_RUNNER, 2)
        child.ask("CREATE SOURCE late FROM KAFKA CONNECTION kafka (TOPIC 'late') FORMAT TEXT WITH (RETRY TIMEOUT = '240s')")
        child.ask("CREATE MATERIALIZED VIEW late_all AS SELECT text FROM late")
        assert child.ask("SELECT count(*) FROM late_all") == {"rows": [[0]]}
        produce(kafka.bootstrap, "late", ["a", "b", "c"])
        assert child.ask("SELECT text FROM late_all ORDER BY text") == {"rows": [["a"], ["b"], ["c"]]}
        assert starts(tmp_path) >= 1
        log = Path(child.ask("INFO")["log"]).read_text(errors="replace")
        assert "Python worker failed to connect back" in log  # Spark's own failure, met for real
    finally:
        child.close()


@pytest.mark.spark
def test_a_statements_job_runs_again_when_its_python_worker_is_late(kafka, tmp_path) -> None:
    kafka.create_topic("plain")
    produce(kafka.bootstrap, "plain", ["x", "y"])
    # Without the daemon every Python worker, a read's planning worker too, is a process
    # that must connect back in 10 s (with it, only a streaming source's is).
    child = Child(kafka.bootstrap, **slow_python(tmp_path), SLUICE_TEST_CONF="spark.python.use.daemon=false")
    try:
        assert child.ask("CREATE SOURCE plain FROM KAFKA CONNECTION kafka (TOPIC 'plain') FORMAT TEXT") == {"rows": []}
        slow_starts(tmp_path, PLANNER, 1)
        assert child.ask("SELECT text FROM plain ORDER BY text") == {"rows": [["x"], ["y"]]}
        assert starts(tmp_path) >= 2
    finally:
        child.close()
