"""Sink faults, counted on real components (Spark, the embedded broker, a killed process).

An UPSERT sink of a 3,000-row table is cut off from its broker in the middle of its first
step, for longer than its transactions' timeout (3 s here; 60 s, the default, with
`--realistic`, then an outage of 75 s): the rows lost, written twice, and the difference
between the rows `SHOW SINKS` reports and those a read_committed reader counts. Then a
dead-letter sink's session is killed (SIGKILL) in the middle of a step's transaction,
five times in turn (issue 35): the dead letters lost and written twice as sluice's
read_committed reader counts them, and the messages the embedded broker still returns to
a read_committed consumer of its own — aborted transactions it does not hide (see README, Sinks).

Usage: python bench/fault_sink.py [--realistic]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.sinks

from tests.support.dead_letters import killed_mid_transaction  # noqa: E402
from tests.support.sinks import outage_case  # noqa: E402

from sluice.kafka.embedded import EmbeddedKafka  # noqa: E402

KILLS = 5


def measure(realistic: bool = False) -> list[tuple[str, object]]:
    timeout_ms, seconds = (60_000, 75.0) if realistic else (3_000, 6.0)
    with tempfile.TemporaryDirectory(prefix="sluice-fault-sink-") as work:
        with EmbeddedKafka() as kafka:
            got = outage_case(kafka, Path(work) / "outage", 3_000, 1_000, seconds, timeout_ms)
        killed = killed_mid_transaction(Path(work) / "killed", KILLS)
    expected_keys = Counter(b'{"a":%d}' % i for i in range(got.rows))
    expected, sunk = Counter(killed.expected), Counter(killed.got)
    return [
        (f"sink outage of {seconds:.0f} s, transaction timeout {timeout_ms / 1000:.0f} s: rows", got.rows),
        ("  rows lost", sum((expected_keys - got.committed).values())),
        ("  rows written twice", sum((got.committed - expected_keys).values())),
        ("  rows reported - rows committed", got.reported - sum(got.committed.values())),
        ("  aborted messages left in the embedded broker's log", got.in_log - sum(got.committed.values())),
        (f"dead-letter sink killed mid-transaction {KILLS} times: dead letters", len(killed.expected)),
        ("  dead letters lost", sum((expected - sunk).values())),
        ("  dead letters written twice", sum((sunk - expected).values())),
        ("  rows reported - dead letters committed", killed.reported[1] - len(killed.got)),
        ("  aborted messages a plain read_committed consumer of the embedded broker counts", killed.in_log - len(killed.got)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--realistic", action="store_true", help="a 60 s transaction timeout and a 75 s outage")
    args = parser.parse_args()
    for name, value in measure(args.realistic):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
