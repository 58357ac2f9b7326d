"""The `Controller`: the one owner of a session's long-running jobs and of where their data
lives, as Materialize's storage controller is.

It owns the continuous ingestions (one Spark stream per source, each with its compaction),
the sinks (a thread each), the one supervisor restarting failed streams, the caches that
reads of stores share (`StoreCaches`, emptied of what compaction or a DROP removes), and
the layout of the data location:

    streams/<source id>/      a source's committed batches (`store`)
    sinks/<sink id>/          a sink's delivered state, identity and progress (`sink`)
    tables/<table id>.jsonl   a table's rows (`tables`)

The session hands it plans' needs — which sources a statement reads, which sink to run and
how to evaluate its relation — and gets stores caught up with their topics, statistics and
statuses back; it never names a path. Spark is imported only when a job needs it: a
controller of a session that only plans starts nothing.

A statement reading continuously ingested sources first asks for them `caught_up`: each
one's stream started if it is not running, then waited for until it has committed the
offsets its topic's high watermarks had when the statement started — read-your-writes.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import QueryCanceled
from sluice.storage.caches import StoreCaches
from sluice.storage.location import Location, discard_data_uri
from sluice.storage.tables import TableStore

if TYPE_CHECKING:
    from sluice.storage.ingest import Ingestion
    from sluice.storage.sink.job import Evaluate, SinkJob
    from sluice.storage.source import SourceRead
    from sluice.storage.store import Store

# Seconds a statement waits for continuously ingested sources to reach the offsets that
# were current when it started (SLUICE_CATCH_UP_TIMEOUT overrides).
CATCH_UP_TIMEOUT = 120.0
# How often the supervisor looks for failed streams.
SUPERVISE_SECONDS = 0.5
# How often a statement waiting for a stream to commit looks whether it has failed.
CATCH_UP_POLL_SECONDS = 0.1


class Controller:
    def __init__(self, data: Location) -> None:
        self.data = data
        self.tables = TableStore(data)
        self.caches = StoreCaches()
        self.running: dict[str, Ingestion] = {}
        # An ingestion being started, until it runs: its backlog may take a while.
        self.starting: dict[str, Ingestion] = {}
        # Sources a statement waits on: (name, offsets read, offsets to read), for progress.
        self.catching_up: dict[str, tuple[str, int, int]] = {}
        self.sinks: dict[str, SinkJob] = {}
        self._closing = threading.Event()
        self._supervisor: threading.Thread | None = None
        # A statement and a sink's thread may ensure one source at once: one of them
        # starts its stream, never both (two streams on one checkpoint fail).
        self._ensuring = threading.Lock()

    # -- the layout --------------------------------------------------------------------

    def _stream_folder(self, item_id: str) -> Location:
        return self.data / "streams" / item_id

    def _sink_folder(self, item_id: str) -> Location:
        return self.data / "sinks" / item_id

    def store(self, item_id: str) -> Store:
        """The committed batches of the source `item_id` (read with this session's caches)."""
        from sluice.storage.store import Store  # pyspark's modules: only when data is read

        return Store(self._stream_folder(item_id), self.caches)

    def ever_ingested(self, item_id: str) -> bool:
        """Whether the source is ingested continuously now, or was (its store is on disk)."""
        return item_id in self.running or item_id in self.starting or self._stream_folder(item_id).exists()

    def ingested_sources(self) -> frozenset[str]:
        """The ids of the sources ingested continuously now or before."""
        stored = {p.name for p in (self.data / "streams").children()}
        return frozenset(stored | set(self.running))

    # -- ingestion ---------------------------------------------------------------------

    def ingest(self, catalog: Catalog, source_ids: Iterable[str]) -> None:
        """Ingest the sources continuously: each one's stream started (or resumed from its
        checkpoint) if it is not running or its store needs repair."""
        for source_id in source_ids:
            self._ensure(catalog, source_id)

    def _ensure(self, catalog: Catalog, item_id: str) -> Ingestion:
        from sluice.spark.session import spark
        from sluice.storage.ingest import Ingestion
        from sluice.storage.source import snapshot_read

        with self._ensuring:
            ingestion = self.running.get(item_id)
            if ingestion is not None and not ingestion.store.sound():
                self.running.pop(item_id).stop()  # its stream starts again, repairing the store first
                ingestion = None
            if ingestion is None:
                read = lambda: snapshot_read(catalog, item_id)  # noqa: E731 - asked at every start
                ingestion = Ingestion(catalog.by_id(item_id), self.store(item_id), spark(), catalog, read)
                self.starting[item_id] = ingestion
                try:
                    ingestion.launch()
                finally:
                    self.starting.pop(item_id)
                self.running[item_id] = ingestion
            if self._supervisor is None:
                supervisor = threading.Thread(target=self._supervise, name="sluice-supervisor", daemon=True)
                supervisor.start()
                self._supervisor = supervisor  # published started: `close` may join it
            return ingestion

    def _supervise(self) -> None:
        """Restart failed streams (see `Ingestion.failure`) after their backoff."""
        while not self._closing.wait(SUPERVISE_SECONDS):
            for ingestion in list(self.running.values()):
                ingestion.supervise()

    def caught_up(self, catalog: Catalog, item_ids: Iterable[str], also: frozenset[str] = frozenset()) -> dict[str, Store]:
        """The stores of the continuously ingested sources the items read (plus `also`),
        each caught up with its topic's offsets as they are now: read-your-writes."""
        from sluice.storage.source import snapshot_read

        continuous = catalog.continuous_sources() | also
        wanted = [s for s in catalog.upstream_sources(item_ids) if s in continuous or self.ever_ingested(s)]
        self.ingest(catalog, wanted)
        timeout = float(os.environ.get("SLUICE_CATCH_UP_TIMEOUT", CATCH_UP_TIMEOUT))
        for source_id in wanted:
            self._check(source_id)  # a failed source fails the statement at once
            self._catch_up(source_id, snapshot_read(catalog, source_id), timeout)
            self.running[source_id].ensure_schema()
        return {s: self.store(s) for s in wanted}

    def _check(self, item_id: str) -> None:
        """Raise `SourceFailed` if the source's ingestion is failed (`Ingestion.failed`)."""
        failure = self.running[item_id].failed()
        if failure is not None:
            raise failure

    def _catch_up(self, item_id: str, source_read: SourceRead, timeout: float) -> None:
        """Wait until the source's stream has committed every offset `source_read` reads
        below its ranges' ends (its high watermarks when it was fixed)."""
        from sluice.kafka.client import regression
        from sluice.storage.ingest import progress

        ingestion = self.running[item_id]
        deadline = time.monotonic() + timeout
        targets = {p: end for p, start, end in source_read.ranges if end > start}
        try:
            while True:
                self._check(item_id)
                seen = ingestion.commits
                read = ingestion.store.committed_offsets()
                # Committed offsets past the high watermarks are the topic's offsets gone back,
                # never "caught up" — unless the stream committed them after the statement fixed
                # its highs: only highs asked after these commits tell the two apart.
                if regression(read, dict(source_read.highs)) is not None:
                    ingestion.verify_running(dict(ingestion.read().highs), read)
                behind = {p: t for p, t in targets.items() if t > read.get(p, 0)}
                if not behind:
                    return
                self.catching_up[item_id] = progress(ingestion.item.name, read, targets)
                if time.monotonic() > deadline:
                    raise QueryCanceled(
                        f'timed out after {timeout:g}s waiting for source "{ingestion.item.name}" '
                        "to ingest its topic up to the offsets current when the statement started",
                        detail=", ".join(
                            f"partition {p}: read {read.get(p, 0)} of {t}" for p, t in sorted(behind.items())
                        ),
                    )
                with ingestion.committed:
                    # Woken by a commit after `read`; the timeout still looks for a failed stream.
                    ingestion.committed.wait_for(lambda: ingestion.commits != seen, CATCH_UP_POLL_SECONDS)
        finally:
            self.catching_up.pop(item_id, None)

    def progress(self) -> tuple[tuple[str, int, int], ...]:
        """What ingestion is under way: per source, (name, offsets read, offsets to read),
        of the catch-up a statement waits on, or else of the backlog it is committing."""
        ingestions = (*tuple(self.starting.values()), *tuple(self.running.values()))
        backlogs = {i.backlog[0]: i.backlog for i in ingestions if i.backlog is not None}
        waited = {entry[0]: entry for entry in tuple(self.catching_up.values())}
        return tuple({**backlogs, **waited}.values())

    def statistics(self, item: Item) -> tuple:
        """SHOW SOURCE STATISTICS' row of the source: its counters as its store has
        committed them now, then its status — `running` (or `starting`, while its stream
        commits its backlog), `failed` with the reason, or `not ingested` when this session
        does not ingest it continuously (the counters are then those its last ingestion
        committed; zero, read without Spark, for a source never ingested). Nothing waits,
        nothing starts."""
        if not self.ever_ingested(item.id):
            return (item.name, 0, 0, 0, None, "not ingested", None)
        ingestion = self.running.get(item.id)
        store = self.store(item.id)
        status, reason = "not ingested", None
        if ingestion is not None:
            failure = ingestion.failed()
            status, reason = ("running", None) if failure is None else ("failed", failure.reason)
        elif item.id in self.starting:
            status = "starting"
        elif (failed := store.failure()) is not None:
            status, reason = "failed", failed
        totals = store.totals()
        last = totals.last_error_ms
        last_error = None if last is None else datetime.fromtimestamp(last / 1000, timezone.utc).replace(tzinfo=None)
        return (item.name, totals.messages, totals.errors, totals.dead_lettered, last_error, status, reason)

    # -- sinks -------------------------------------------------------------------------

    def start_sink(self, sink: Item, catalog: Catalog, evaluate: Evaluate, version: Callable[[], Any]) -> None:
        """Run the sink on a thread of its own: `version()` changes when what its relation
        reads may have changed, `evaluate` finds the relation's changes."""
        from sluice.storage.sink.job import SinkJob

        if sink.id not in self.sinks:
            job = SinkJob(sink, catalog, self._sink_folder(sink.id), evaluate, version)
            self.sinks[sink.id] = job
            job.start()

    def sink_status(self, sink_id: str) -> tuple[str, int, int | None, str | None]:
        """(status, rows written, last offset, error) of a sink: its job's, or, when this
        session does not run it, `stopped` and what its last run committed."""
        job = self.sinks.get(sink_id)
        if job is not None:
            status = job.status
            return (status.state, status.rows, status.offset, status.error)
        from sluice.kafka.progress import Progress

        try:
            committed = Progress.from_json((self._sink_folder(sink_id) / "progress.json").read_bytes())
        except (OSError, ValueError, TypeError):  # none yet, or not a record this sluice wrote
            committed = Progress()
        return ("stopped", committed.rows, committed.offset, None)

    def drain_sinks(self, timeout: float) -> list[str]:
        """Wait (up to `timeout` seconds) until every running sink has delivered what its
        relation holds now, or is stalled on its error (a failed one retries meanwhile);
        the ids of the sinks it ran."""
        asked = [(job, job.ask()) for job in self.sinks.values()]
        deadline = time.monotonic() + timeout
        for job, number in asked:
            job.answered_after(number, deadline - time.monotonic())
        return list(self.sinks)

    # -- dropping and closing ------------------------------------------------------------

    def drop(self, items: list[Item]) -> None:
        """Stop what runs for the dropped items and remove their data: sinks first, before
        what they read stops."""
        for item in items:
            job = self.sinks.pop(item.id, None)
            if job is not None:
                job.stop()
            with contextlib.suppress(OSError):
                self._sink_folder(item.id).remove()
        for item in items:
            self.tables.drop(item)
            ingestion = self.running.pop(item.id, None)
            if ingestion is not None:
                ingestion.stop()
            folder = self._stream_folder(item.id)
            with contextlib.suppress(OSError):
                folder.remove()
            self.caches.forget(folder)

    def close(self, discard: bool = False) -> None:
        """Stop every job; with `discard`, remove a data URI's data too (a temporary data
        directory's)."""
        for job in self.sinks.values():
            job.stop(wait=False)
        for job in self.sinks.values():
            job.stop()
        self.sinks.clear()
        self._closing.set()
        # Stopped first: the supervisor may be restarting one, its backlog's jobs cancelled.
        for ingestion in list(self.running.values()):
            ingestion.stop()
        if self._supervisor is not None:
            self._supervisor.join()
        self.running.clear()
        if discard:
            with contextlib.suppress(Exception):  # best effort: the process may be ending
                discard_data_uri(self.data)
