"""Store faults, counted on real components (Spark, the embedded broker, files on disk).

Each damage of tests/support/store_faults.py is done to the stores of an ENVELOPE NONE source
with a dead-letter table and of an UPSERT source under a materialized view — with the
session stopped, and (for the damages a running stream allows) while it runs — and what
the session then shows is compared with what was produced: right, a loud error, or lost
silently (fewer rows than produced, no error). Then sessions ingesting both sources are
killed (SIGKILL) at random points over several rounds, and the rows lost or duplicated
afterwards are counted over the sources, the dead-letter table, the view and the errors.

Usage: python bench/fault_store.py [--rounds N]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.store_faults

from tests.support.store_faults import (  # noqa: E402
    DAMAGES,
    WHILE_RUNNING,
    Produced,
    baseline,
    damage_case,
    differences,
    kill_rounds,
    open_session,
    shown,
)

from sluice.kafka.embedded import EmbeddedKafka  # noqa: E402


def damages(work: Path) -> list[tuple[str, str]]:
    """(damage case, its outcome) for each damage case."""
    cases = [(d, False) for d in DAMAGES] + [(d, True) for d in WHILE_RUNNING]
    with EmbeddedKafka() as kafka:
        produced = Produced(kafka.bootstrap)
        produced.create_topics(kafka)
        baseline(work / "base", work / "older", produced)
        return [
            (
                f"{damage}{' (running)' if running else ''}",
                damage_case(work / "base", work / "older", work / f"case-{i}", produced, damage, running),
            )
            for i, (damage, running) in enumerate(cases)
        ]


def kills(work: Path, rounds: int) -> tuple[int, int]:
    """(rows lost, rows duplicated) after `rounds` sessions were killed while ingesting."""
    work.mkdir(parents=True)
    with EmbeddedKafka() as kafka:
        produced = Produced(kafka.bootstrap, seed=rounds)
        produced.create_topics(kafka)
        produced.more(20)
        kill_rounds(work / "data", produced, rounds, random.Random(rounds), work / "child.log")
        produced.more(10)
        with open_session(work / "data", kafka.bootstrap) as session:
            return differences(shown(session), produced.expected())


def measure(rounds: int = 5) -> list[tuple[str, object]]:
    with tempfile.TemporaryDirectory(prefix="sluice-fault-store-") as work:
        cases = damages(Path(work) / "damages")
        lost, duplicated = kills(Path(work) / "kills", rounds)
    outcomes = [outcome for _, outcome in cases]
    return [
        ("store damages tried", len(outcomes)),
        ("store damages answered right", sum(o == "right" for o in outcomes)),
        ("store damages lost silently", sum(o.startswith("lost") for o in outcomes)),
        ("store damages answered wrong", sum(o.startswith("wrong") for o in outcomes)),
        ("store damages failing loudly", sum(o.startswith("loud") for o in outcomes)),
        *((f"  {case}", outcome) for case, outcome in cases if outcome != "right"),
        ("kill rounds", rounds),
        ("rows lost after kills", lost),
        ("rows duplicated after kills", duplicated),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="sessions killed (default 5)")
    args = parser.parse_args()
    for name, value in measure(args.rounds):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
