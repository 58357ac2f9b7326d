"""Kafka sinks: a job per sink writing its relation's changes to a topic, exactly once.

A step: wait for a change of what the relation reads (`version()`), find the relation's
changes (`evaluate`: the relation diffed against the delivered state, `state`, or read
from its stores, a dead-letter table's), deliver them with the progress record in one
transaction (`delivery`), and keep the state of the version committed.

A relation with errors (a query over it would fail) delivers nothing: the sink is
`stalled` with the error and tries again at the next change, so it resumes by itself once
the error is retracted. A KEY that two rows share stalls it as well (23505).

**Faults.** A Kafka or registry fault (a broker unreachable, a transaction that failed)
aborts the step's transaction; the sink shows `failed` with the reason and retries with
the connection's backoff (`kafka/retry.py`'s doubling delays, capped at the default RETRY
DELAY MAX), from its last committed state, until it gets through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.catalog.items import (
    DEFAULT_RETRY_DELAY_MAX_MS,
    DEFAULT_RETRY_TIMEOUT_MS,
    Item,
)
from sluice.catalog.store import Catalog
from sluice.errors import ExternalSystemError, InternalError, QueryCanceled, SqlError, UniqueViolation
from sluice.kafka.progress import Progress
from sluice.kafka.retry import RetryPolicy
from sluice.spark.failures import failure_reason
from sluice.storage.location import Location
from sluice.storage.sink.changes import Changes
from sluice.storage.sink.delivery import Delivery, sink_identity
from sluice.storage.sink.envelope import SinkEnvelope
from sluice.storage.sink.envelopes import envelope_of
from sluice.storage.sink.state import SinkState

# How often an idle sink looks for changes in what its relation reads.
POLL_SECONDS = 0.2

STARTING, RUNNING, STALLED, FAILED = "starting", "running", "stalled", "failed"


@dataclass
class Status:
    """A sink's status; `received`: how many changes its last step brought to the
    driver (see the module docstring: what a step costs beyond Spark)."""

    state: str = STARTING
    rows: int = 0
    offset: int | None = None
    error: str | None = None
    received: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # the last step's parts'


# evaluate(envelope, state, progress): the changes of the relation since `progress`, its
# new state written as `state`'s next version; raises the relation's error.
Evaluate = Callable[[SinkEnvelope, SinkState, Progress], Changes]


@dataclass
class SinkJob:
    """One sink's loop, on a thread of its own: wait for a change of what the relation
    reads, evaluate its changes, deliver them. `version()` changes when what it reads may
    have changed."""

    sink: Item
    catalog: Catalog
    root: Location
    evaluate: Evaluate
    version: Callable[[], Any]
    status: Status = field(default_factory=Status)
    # Drain requests: each asks for one evaluation begun after it; `answered` counts the
    # requests the last finished evaluation began after.
    asked: int = 0
    answered: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def ask(self) -> int:
        with self._changed:
            self.asked += 1
            return self.asked

    def answered_after(self, number: int, timeout: float) -> None:
        thread = self._thread
        if thread is None:  # the controller starts a job as it adds it
            raise InternalError.bug(f'a drain of sink "{self.sink.name}", whose job never started')
        with self._changed:
            self._changed.wait_for(
                lambda: self.answered >= number or not thread.is_alive(),
                max(timeout, 0),
            )

    def _answer(self, number: int) -> None:
        with self._changed:
            self.answered = max(self.answered, number)
            self._changed.notify_all()

    def start(self) -> None:
        thread = threading.Thread(target=self._run, name=f"sluice-sink-{self.sink.name}", daemon=True)
        thread.start()
        self._thread = thread  # published started: `stop` may join it

    def stop(self, wait: bool = True) -> None:
        """Stop the loop; with `wait`, once its thread has ended."""
        self._stop.set()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        retry = RetryPolicy(DEFAULT_RETRY_TIMEOUT_MS / 1000, DEFAULT_RETRY_DELAY_MAX_MS / 1000, self.sink.name)
        delays = retry.delays()
        while not self._stop.is_set():
            delivery = None
            try:
                # Inside: writing its identity may fail too (a full disk), and is retried.
                delivery = Delivery(self.sink, self.catalog, sink_identity(self.root))
                self._deliver_changes(delivery)
                return
            except Exception as e:  # noqa: BLE001 - a fault fails the sink until a retry gets through
                self.status.state = FAILED
                self.status.error = e.message if isinstance(e, SqlError) else failure_reason(e, str(self.root))
            finally:
                if delivery is not None:
                    delivery.close()
            self._stop.wait(next(delays))

    def _deliver_changes(self, delivery: Delivery) -> None:
        state = SinkState(self.root)
        envelope = envelope_of(self.sink, self.catalog)
        envelope.prepare()
        progress = delivery.open()
        state.upgrade(progress.version)
        state.keep_only(progress.version)
        self.status.rows, self.status.offset = progress.rows, progress.offset
        seen = object()
        while not self._stop.is_set():
            asked = self.asked
            version = self.version()
            if version == seen and asked == self.answered:
                self._stop.wait(POLL_SECONDS)
                continue
            started = time.perf_counter()
            try:
                changes = self.evaluate(envelope, state, progress)
                if envelope.unique and changes.duplicate is not None:
                    raise UniqueViolation(
                        f"the sink's key is not unique in its relation: two rows have the key {changes.duplicate!r}"
                    )
            except (ExternalSystemError, QueryCanceled):
                raise  # a fault, not the relation's error: the sink fails and retries
            except SqlError as e:  # the relation's error: nothing past it is written
                state.keep_only(progress.version)
                self.status = Status(STALLED, progress.rows, progress.offset, e.message)
                seen = version
                self._answer(asked)
                continue
            began = time.perf_counter()
            if changes:
                progress = delivery.deliver(envelope.batch(changes), progress, changes.read)
                # What SHOW SINKS tells of the sink while no session runs it.
                (self.root / "progress.json").replace(progress.to_json())
            state.keep_only(progress.version)
            seconds = {"evaluated": began - started, **changes.seconds, "delivered": time.perf_counter() - began}
            self.status = Status(RUNNING, progress.rows, progress.offset, received=changes.received, seconds=seconds)
            seen = version
            self._answer(asked)
