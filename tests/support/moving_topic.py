"""A topic that keeps moving while a query runs, and pauses injected between a query's reads.

`Producer` writes a new value for every key of an ENVELOPE UPSERT topic, round after round,
until stopped; `until_a_commit` wraps `Store.frame` to hold a query after it reads a
source's retractions until ingestion has committed another micro-batch, and `paused` wraps
any read with a fixed pause. tests/test_snapshot_consistency.py asserts with them that a
snapshot sees each key once; bench/fault_inputs.py counts the queries that do not.
"""

from __future__ import annotations

import threading
import time

from sluice.kafka.embedded import produce

KEYS = [f"k{i}" for i in range(10)]
PAUSE_SECONDS = 0.4  # a pause between two reads of a query, while the producer writes on
COMMIT_WAIT_SECONDS = 15.0


class Producer:
    """Rounds of one new value for every key, until stopped; counts what it produced."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rounds += 1
            produce(self.bootstrap, self.topic, [(k.encode(), f"v{self.rounds}".encode()) for k in KEYS])
            time.sleep(0.05)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


def paused(original):
    """`original` followed by a pause of `PAUSE_SECONDS`, as if the query were slow there."""

    def pausing(*args, **kwargs):
        result = original(*args, **kwargs)
        time.sleep(PAUSE_SECONDS)
        return result

    return pausing


def until_a_commit(original):
    """`Store.frame` pausing after it reads an upsert source's retractions until the stream
    has committed another micro-batch (or `COMMIT_WAIT_SECONDS` passed): the moment a read
    of the rows listed anew would see new rows whose retractions it missed."""

    def frame(store, *args, **kwargs):
        before = store.committed()
        result = original(store, *args, **kwargs)
        deadline = time.monotonic() + COMMIT_WAIT_SECONDS
        while args[-1] == "retract" and store.committed() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        return result

    return frame
