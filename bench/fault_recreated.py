"""Topics re-created under a source (issue 35), counted on real components (Spark, the
embedded broker run by `sluice kafka serve` as a child process, restarted on the same port
to re-create its topic).

Each run of `RUNS` (tests/support/recreated_topic.py's `recreated_run`) has a source read a topic
under a materialized view, re-creates the topic with fewer messages (or fewer
partitions) under the running session or while none runs, takes what each session then
shows (the running one, the next, the next once the new topic has passed the old one's
end), and starts the source over as its hint says. Printed: the runs, the runs in which a
session showed anything but the source failed with the reason (SHOW SOURCE STATISTICS,
and a query's error and hint; each such run also on stderr), and the rows wrong (missing
or extra) in the sources started over.

Usage: python bench/fault_recreated.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.recreated_topic

from tests.support.recreated_topic import Run, expected_shown, recreated_run  # noqa: E402

RUNS = (
    Run(old=100, new=3),
    Run(old=100, new=0),
    Run(old=100, new=3, while_running=False),
    Run(old=100, new=10, partitions=2, partitions_after=1),
)


def measure() -> list[tuple[str, object]]:
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="sluice-fault-recreated-") as work:
        for i, run in enumerate(RUNS):
            outcomes.append((run, recreated_run(run, Path(work) / f"run-{i}")))
    wrong = [(run, seen) for run, got in outcomes for seen in got.shown if seen != expected_shown(run.reason())]
    for run, seen in wrong:
        print(f"# {run}: shown {seen}", file=sys.stderr)
    return [
        ("topics re-created under a source (runs)", len(RUNS)),
        ("  runs a session showed anything but failed with the reason", len({run for run, _ in wrong})),
        ("  rows wrong after starting the source over", sum(got.rows_wrong for _, got in outcomes)),
    ]


if __name__ == "__main__":
    for name, value in measure():
        print(f"{name}: {value}")
