"""The fault figures of issues 14 and 35, each measured on real components (Spark, the
embedded broker, files on disk), printed as one table.

Usage: python bench/faults.py

Each area measures itself in its own module and returns (figure, value) lines:
`fault_poison` (poison kinds tried / that break a source), `fault_outage` (outage seconds
survived, broker connections per idle source per second), `fault_store` (store damages
tried / lost silently, kill -9 rounds / messages lost / duplicated), `fault_access` (second
sessions refused, places a secret appears, registry-login messages decoded), `fault_inputs`
(hostile inputs tried / answered with anything but a `SqlError`), `fault_sink` (rows a sink
loses or writes twice through a broker outage longer than its transaction timeout, and dead
letters after kills in the middle of a transaction), `fault_recreated` (topics re-created
under a source / runs shown as anything but failed with the reason / rows wrong once the
source is started over), `fault_restored` (older catalogs put back / ids reused / files
deleted). Unlike the other benchmarks these are counts of failures, not timings against
hand-written PySpark: a hand-written job has no error path to compare against.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fault_access  # noqa: E402
import fault_inputs  # noqa: E402
import fault_outage  # noqa: E402
import fault_poison  # noqa: E402
import fault_recreated  # noqa: E402
import fault_restored  # noqa: E402
import fault_sink  # noqa: E402
import fault_store  # noqa: E402

AREAS = (
    fault_poison, fault_outage, fault_recreated, fault_store, fault_restored, fault_sink, fault_access, fault_inputs
)


def main() -> None:
    figures = []
    for area in AREAS:
        started = time.monotonic()
        lines = area.measure()
        figures += lines
        print(f"# {area.__name__}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    width = max(len(name) for name, _ in figures)
    for name, value in figures:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
