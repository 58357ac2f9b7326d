"""Watching Spark's jobs from a test: which run now, and waiting (a while at most) until a
condition on them holds — what a cancel's tests ask of the running Spark session."""

from __future__ import annotations

import time


def active_jobs(spark) -> list[int]:
    return list(spark.sparkContext.statusTracker().getActiveJobsIds())


def wait_for(condition, seconds: float = 60) -> bool:
    """Whether `condition()` held within `seconds`, asked every 0.1 s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False
