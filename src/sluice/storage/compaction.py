"""Compaction of a continuously ingested source's committed batches into a base, in the
background of its ingestion, so that a read lists, checks and anti-joins a base and a few
commits rather than every micro-batch since the source was created (how reads and
repairs use a base is in `store`'s docstring).

Compaction keeps a read's cost flat however many commits there are:
it writes commits 0 to k as one base, keyed by k — the rows, errors and state still standing
(for an upsert source, what the retractions of those commits leave), every dead-letter
and `log` row (the dead-letter table and the tolerance count read them all) — and
publishes it as a commit is published: files fsynced and listed with bytes, rows and
CRC-32, moved into place, then its record `compacted/<k>.json`, which holds commit k's
offsets (from where commit 0 began) and totals. A read, and a check, then starts from the
newest base and goes on with commits k+1, k+2, …; a base is damaged as a commit is, and
its damage is the damage of commit 0 (everything is read again from Kafka, or every read
fails naming it). Retractions in later commits may still retract a base's rows: base
rows keep their `(__p, __o)`. The commits a base replaces (their files and records, but
commit k's record, which still gives the totals and the committed offsets) and older
bases are removed only while no read is using the store (`reading`): a read started
before the base was published may still list them.

A compaction starts once `SLUICE_COMPACT_AFTER` commits (16 unless set; 0: never) have
followed the base or, while the stream is live (its last micro-batch read all there was:
during a catch-up a compaction would take cores from it), once the commits after the
base retract more rows than a read filters out without a join (`FILTERED_RETRACTIONS`: a
base holds no retraction, so reads and micro-batches then need none); and never sooner
after the last one than four times that one's duration: rewriting a large base takes its
share of the cores, not all of them. Its Spark jobs run in a thread, alongside the
micro-batches, in a scheduler pool of their own, so that ingestion goes on with a fair
share of the cores however large the base.
Stopping the ingestion cancels them; what they left behind is a staging folder that the
next start removes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time

from pyspark.sql import SparkSession

from sluice.storage.location import Location
from sluice.storage.records import files_of, seal
from sluice.storage.store import Store, few_retractions
from sluice.storage.stored import IDENTITY

# Commits after the base that start a compaction (SLUICE_COMPACT_AFTER overrides).
COMPACT_AFTER = 16
# A compaction waits this many times the last one's duration after it ended.
SPACING = 4.0
# What a base keeps: `retract` is spent on the base's own rows, `seen` and `skip` only
# count messages, which the commit records' totals already hold.
BASE_KINDS = ("oks", "errs", "dlq", "log", "state")

log = logging.getLogger(__name__)


def compact_after() -> int:
    return int(os.environ.get("SLUICE_COMPACT_AFTER", COMPACT_AFTER))


def compact(spark: SparkSession, store: Store, upsert: bool) -> int | None:
    """Write and publish the base of every sound commit so far, then remove what it
    replaces if no read is using the store. Returns the base's commit number, None when
    there is nothing to compact (no commits past the base, or a damaged store: its repair
    comes first)."""
    inspection = store.inspect()
    records = inspection.records
    if inspection.damage is not None or not records or records[-1].get("base"):
        return None
    last = records[-1]
    number = last["commit"]
    staging = store.root.temporary(f"compaction-{number}-")
    try:
        written = staging / "out"
        retracted = store.frame(spark, records, "retract").select(*IDENTITY) if upsert else None
        for kind in BASE_KINDS:
            if not any(files_of(records, kind)):
                continue
            rows = store.frame(spark, records, kind).drop("__out")
            if retracted is not None and kind in ("oks", "errs", "state"):
                rows = rows.join(retracted, IDENTITY, "left_anti")
            rows.coalesce(spark.sparkContext.defaultParallelism).write.parquet((written / f"__out={kind}").uri)
        written.make_dirs()
        prefix = f"compacted/{number}"
        files = seal(written, prefix)
        firsts: dict[str, int] = {}
        for record in records:
            for partition, (start, _) in record["offsets"].items():
                firsts.setdefault(partition, start)
        base = {
            "commit": number,
            "base": True,
            "batch": last["batch"],
            "ingested_ms": last["ingested_ms"],
            "offsets": {p: [firsts.get(p, to), to] for p, (_, to) in last["offsets"].items()},
            "files": files,
            "counts": {kind: sum(f["rows"] for f in files if f["kind"] == kind) for kind in BASE_KINDS},
            "totals": last["totals"],
        }
        store.compacted.make_dirs()
        (store.root / prefix).remove()  # an attempt that died before its record
        written.move_to(store.root / prefix)
        store.compacted.sync()
        (store.compacted / f"{number}.json").replace(json.dumps(base).encode())
    finally:
        with contextlib.suppress(OSError):
            staging.remove()
    remove_replaced(store)
    return number


def remove_replaced(store: Store) -> bool:
    """Remove what the newest base replaces — older bases, the commits it compacted (but
    the record of its last commit) — unless a read is using the store; whether it did."""
    bases = store.bases()
    if not bases:
        return True
    number = bases[-1]

    def replaced() -> list[Location]:
        # Records before the folders they list: a crash leaves no record without its files.
        return [
            *(store.compacted / f"{n}.json" for n in bases[:-1]),
            *(f for f in store.compacted.children() if f.name.isdigit() and f.name != str(number)),
            *(store.commits / f"{n}.json" for n in store.committed() if n < number),
            *(f for f in store.batches.children() if _at_most(f.name, number)),
        ]

    return store.remove_unread(replaced)


def _at_most(name: str, number: int) -> bool:
    return name.isdigit() and int(name) <= number


class Compactor:
    """The background compactions of one ingestion's store: `poke` after each commit."""

    def __init__(self, spark: SparkSession, store: Store, upsert: bool) -> None:
        self.spark = spark
        self.store = store
        self.upsert = upsert
        self.after = compact_after()
        self.group = f"sluice-compaction-{store.root.name}"
        self._wake = threading.Event()
        self._stopping = False
        # `poke` runs on the stream's commit thread and `stop` on the session's: the lock keeps
        # `stop` from joining a thread `poke` has made but not yet started.
        self._starting = threading.Lock()
        self._thread: threading.Thread | None = None
        self._next_at = 0.0  # monotonic time before which no compaction starts
        self._tidy = False  # whether the newest base's replaced files are all removed
        self._live = False  # whether the last commit's micro-batch read all there was

    def poke(self, live: bool) -> None:
        """After a commit; `live`: its micro-batch read all there was to read."""
        with self._starting:
            if self.after <= 0 or self._stopping:
                return
            self._live = live
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.group, daemon=True)
                self._thread.start()
        self._wake.set()

    def _due(self) -> bool:
        head = self.store.head
        if head is None or time.monotonic() < self._next_at:
            return False
        bases = self.store.bases()
        if head["commit"] - (bases[-1] if bases else -1) >= self.after:
            return True
        if not self._live:
            return False
        return not few_retractions(self.store.inspect().records)

    def _run(self) -> None:
        context = self.spark.sparkContext
        context.setJobGroup(self.group, "sluice: compaction", interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", "sluice-compaction")
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            if not self._tidy:
                self._tidy = remove_replaced(self.store)
            if not self._due():
                continue
            began = time.monotonic()
            try:
                if compact(self.spark, self.store, self.upsert) is not None:
                    self._tidy = False
            except Exception:  # noqa: BLE001 - a failed compaction loses nothing: the commits stay
                if self._stopping:
                    return
                log.warning("compaction of %s failed", self.store.root, exc_info=True)
            ended = time.monotonic()
            self._next_at = ended + SPACING * (ended - began)

    def stop(self) -> None:
        """Cancel a running compaction and wait for its thread to end."""
        with self._starting:
            self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self.spark.sparkContext.cancelJobGroup(self.group)
            self._thread.join()
