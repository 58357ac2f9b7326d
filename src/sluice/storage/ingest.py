"""Continuous ingestion: one Spark streaming query per source, reading its topic once per
micro-batch and committing the batch's rows, errors and dead-letter rows together (see
`store`). An upsert source's read tasks first keep only each raw key's latest message
(and every one whose error must be seen: the reader's `latest_per_key`), so superseded
values are never decoded or sent to the JVM; the micro-batch is then reduced to each key's
latest message and set against its state — the winning message of every key, errors
included — as its commits leave it (`Store.standing`), giving changes: the message that
left the state (−) and the one that entered it (+) (`UpsertChanges`).

Why not Spark's stateful operators: `transformWithState` calls a Python function per key
and micro-batch, converting every row into Python and back; measured on two cores (1 M
Avro messages, 100 k keys, `bench/upsert.py`) it caught up at 12–20 k messages/s, while
reducing each micro-batch in the JVM (`max_by` per key) and joining it to the state the
commits hold ran at 34–67 k/s, and 68–78 k/s with the read tasks' reduction (a
500 k-message micro-batch then sends 100 k rows on, and its read costs about what reading
the raw bytes does) and one pass over the messages. Keeping the state in the store also
makes it as durable as the commits: a lost or older checkpoint costs an upsert source
nothing, and its repair reads again only from the first damaged commit. The price is a
fixed cost per micro-batch of about 0.9 s on two cores (three Spark jobs: the read with
the partial reduction, the state's read, the final reduction with the write) against
~0.6 s with `transformWithState`.

A stream that starts with a backlog (a new source's topic, or what arrived while it was
stopped) has it committed first by batch jobs of the same rows, bounded as micro-batches
are (`Ingestion._commit_backlog`), and starts where they end. Spark runs a streaming
query's Python source in a Python process it starts for it, ~2 s on two cores before the
first micro-batch; a batch job does not wait for that, so a statement waiting for the
backlog has it ~2 s sooner (measured on two cores: 1 M upsert messages committed in
4.4–6.2 s against 6.6–8.5 s, 20 k in 3.2 s against 4.9 s), and the stream starts when
nobody waits for it.

The storage `Controller` owns a session's ingestions: it starts them, waits for them to catch
up with the offsets a query must see (read-your-writes), and stops them. A stream fails when a
fault outlasts its source's RETRY TIMEOUT (the reader waits out shorter ones) or on any other
error; the controller's supervisor then shows the source failed, with the reason, and restarts
the stream from its checkpoint — nothing lost, nothing read twice — with backoff (by the
source's RETRY DELAY MAX) until a restarted stream gets through a trigger. Offsets gone
backwards (a partition's high watermark below what the source committed: its topic recreated,
or data lost) fail it for good instead, found by its stream, by a statement catching up, or at
its start, and recorded in its store (`Ingestion.verify`): no restart would read the topic's
offsets below the committed ones, so it stays failed, in this session and the next, until the
source is dropped and created again. Spark failing to start a Python worker in time (see
`failures`) is transient: a backlog's job meeting it runs again, and a statement waits for a
stream restarted after it — both within the source's RETRY TIMEOUT (`Ingestion.failed`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from sluice.catalog.items import Item, SourceDesc
from sluice.catalog.store import Catalog
from sluice.errors import InternalError, SourceFailed
from sluice.kafka.client import OffsetsRegressed, regression
from sluice.kafka.retry import SourceUnavailable
from sluice.spark.failures import WORKER_LATE, failure_reason, raised_as, retried
from sluice.spark.kafka_source import NAME, admitted
from sluice.spark.pyspark_code import F
from sluice.spark.session import activate
from sluice.storage.compaction import Compactor
from sluice.storage.source import (
    SourceRead,
    deletes,
    latest_per_key,
    reader_options,
    retry_policy,
    source_messages,
    source_parts,
    state_columns,
    with_decode_errors,
)
from sluice.storage.store import Store
from sluice.storage.stored import no_standing

# A stream's trigger: the next micro-batch as soon as the last one ends. An idle stream asks
# Kafka for new offsets every `spark.sql.streaming.pollingDelay` (`render/spark.py`: 100 ms),
# a sleep of that long. A processing-time trigger of 100 ms would instead wait until the
# wall clock reaches the next multiple of 100 ms (Spark's `SystemClock.waitTillTime`): when
# the clock steps back (NTP, a VM restored or resumed), every stream sleeps as long as the
# step, asking Kafka nothing — messages sit past the committed offsets while nothing fails.
TRIGGER = "0 seconds"
# Messages a micro-batch reads at most (SLUICE_MAX_BATCH_MESSAGES overrides; 0: no bound):
# a long backlog is caught up with in bounded batches. A micro-batch's memory does not grow
# with its messages (rows stream through to its files; an upsert source's read tasks keep
# a bounded window of keys), but each costs seconds whatever it reads — its jobs and their
# tasks, its commit, and for an upsert source every key it shares with the batch before
# retracted and entered again: 1 M messages over 100 k keys caught up in 11.3 s as two
# micro-batches of 500 k and in 6.3 s as one (`bench/upsert.py`, two cores).
MAX_BATCH_MESSAGES = 2_000_000


def max_batch_messages() -> int:
    return int(os.environ.get("SLUICE_MAX_BATCH_MESSAGES", MAX_BATCH_MESSAGES))


def progress(name: str, read: dict[int, int], targets: dict[int, int]) -> tuple[str, int, int]:
    """A source's progress towards `targets` (`{partition: offset}`) having read up to
    `read`: (its name, offsets read, offsets to read), as `Controller.progress` reports it."""
    return name, sum(min(read.get(p, 0), t) for p, t in targets.items()), sum(targets.values())


class UpsertChanges:
    """An upsert source's micro-batch of messages (with `columns`) against its state before
    it (`standing`: `(__k, __p, __o)`, the key and place of every key's winning message):
    every error message (`__log`, for the dead-letter table and the tolerance count), each
    batch key's latest message by (partition, offset) entering the state (`__diff` +1; a
    tombstone enters nothing: 0), carrying how many messages the key had (`__seen`: each
    message stands for `count` of them, see the reader's `latest_per_key`), and the key's
    old winner leaving it (−1, its place only).

    One reduction gives them all: an error message is also a group of its own (its place
    in the grouping), and the old winner is joined to the latest message, both coming out
    of one row. So the messages are read once, with no cache between the read and the
    reduction, and a micro-batch is two shuffles (by key, on both sides) and one pass.

    The columns are built once, for every micro-batch of a stream (see `BatchRows`)."""

    def __init__(self, columns: list[str]) -> None:
        columns = [c for c in columns if c != "count"]
        log = F.col("__log")
        self.candidates = [
            "*",
            F.explode(
                F.when(F.col("__error").isNotNull(), F.array(F.lit(False), F.lit(True))).otherwise(
                    F.array(F.lit(False))
                )
            ).alias("__log"),
        ]
        self.groups = [
            "__ukey", "__log", F.when(log, F.col("partition")).alias("__lp"), F.when(log, F.col("offset")).alias("__lo")
        ]
        self.aggregates = [
            F.max_by(F.struct(*columns), F.struct("partition", "offset")).alias("__latest"),
            F.sum("count").alias("__seen"),
        ]
        self.old = [F.col("__k").alias("__ukey"), F.lit(False).alias("__log"), "__p", "__o"]
        self.joined = [
            *(F.col("__latest")[c].alias(c) for c in columns if c != "__ukey"),
            "__ukey",
            "__log",
            "__seen",
            "__p",
            "__o",
            F.explode(F.when(F.col("__p").isNull(), F.array(F.lit(1))).otherwise(F.array(F.lit(1), F.lit(-1)))).alias(
                "__role"
            ),
        ]
        entering = F.col("__role") == 1
        moved = {
            "partition": F.when(entering, F.col("partition")).otherwise(F.col("__p")),
            "offset": F.when(entering, F.col("offset")).otherwise(F.col("__o")),
            "__ukey": F.col("__ukey"),
        }
        self.changes = [
            *(moved[c].alias(c) if c in moved else F.when(entering, F.col(c)).alias(c) for c in columns),
            F.when(~entering, F.lit(-1)).when(log | deletes(), F.lit(0)).otherwise(F.lit(1)).alias("__diff"),
            log,
            F.when(entering & ~log, F.col("__seen")).otherwise(F.lit(0)).alias("__seen"),
        ]

    def __call__(self, messages: DataFrame, standing: DataFrame) -> DataFrame:
        latest = messages.select(*self.candidates).groupBy(*self.groups).agg(*self.aggregates)
        joined = latest.join(standing.select(*self.old), ["__ukey", "__log"], "left").select(*self.joined)
        return joined.select(*self.changes)


def stream_read(spark: SparkSession, item: Item, catalog: Catalog, start_offsets, committed) -> DataFrame:
    """The source's topic as its stream reads it from `start_offsets`, having committed
    `committed` (the reader's options: `{"partition": offset}` as JSON), to be decoded by
    `ingested_messages`."""
    return (
        _reader(spark.readStream, item, catalog)
        .option("start_offsets", start_offsets)
        .option("committed", committed)
        .option("max_messages", str(max_batch_messages()))
        .load()
    )


def backlog_read(spark: SparkSession, item: Item, catalog: Catalog, ranges) -> DataFrame:
    """The source's topic in `ranges` (the reader's option: `[[partition, from, to], …]` as
    JSON) read by a batch job, to be decoded by `ingested_messages`: a backlog its
    ingestion commits before its stream starts (see `Ingestion._commit_backlog`)."""
    return _reader(spark.read, item, catalog).option("ranges", ranges).load()


def _reader(reader, item: Item, catalog: Catalog):
    """`reader` (`spark.read` or `spark.readStream`) of the source's topic with the options
    of every read its ingestion makes."""
    desc = item.source_desc
    options = reader_options(desc, catalog)
    if desc.envelope != "none":
        options["latest_per_key"] = json.dumps(latest_per_key(desc))
    return reader.format(NAME).options(**options).option("retry", retry_policy(item).to_json())


def ingested_messages(raw: DataFrame, desc: SourceDesc) -> DataFrame:
    """An ingestion's read of its topic (its stream's or a backlog's), decoded; an upsert
    source's reduced in each read task to its keys' latest (`latest_per_key`) and narrowed
    to what its state and rows are made of (`state_columns`)."""
    messages = source_messages(with_decode_errors(raw, desc), desc)
    if desc.envelope != "none":
        messages = messages.select(*state_columns(messages, desc))
    return messages


class BatchRows:
    """One row per (message, kind it goes to): the rows of a commit's files, `__out`
    naming the kind (see `store`). An upsert source's messages go through its state first
    (`UpsertChanges` against `standing`).

    Built for the frame of a stream's messages, applied to each of its micro-batches: the
    columns are unresolved, so they bind to each micro-batch by name; building them is
    ~800 calls into the JVM, ~0.1 s of a one-message micro-batch's ~0.8 s."""

    def __init__(self, messages: DataFrame, item: Item) -> None:
        desc = item.source_desc
        upsert = desc.envelope != "none"
        self.changes = UpsertChanges(messages.columns) if upsert else None
        redirected = desc.dead_letter_table is not None
        # The changes have the messages' columns: their parts are the same expressions.
        parts = source_parts(messages, desc, item)
        error_kind = "dlq" if redirected else "errs"
        if not upsert:
            kinds = [
                F.when(parts.ok, F.lit("oks")),
                F.when(parts.failed, F.lit(error_kind)),
                F.when(parts.skipped, F.lit("skip")),
            ]
        else:
            diff, log = F.col("__diff"), F.col("__log")
            kinds = [
                F.when((diff == 1) & parts.ok, F.lit("oks")),
                F.when((diff == 1) & parts.failed & F.lit(not redirected), F.lit("errs")),
                F.when(diff == -1, F.lit("retract")),
                F.when(log, F.lit("dlq" if redirected else "log")),
                # How many messages a key had rides on its `state` row; a tombstone has none.
                F.when((F.col("__seen") > 0) & (diff == 0) & ~log, F.lit("seen")),
                F.when(diff == 1, F.lit("state")),
            ]
        self.exploded = F.explode(F.array_compact(F.array(*kinds))).alias("__out")
        self.out = out = F.col("__out")
        # A dead-letter row keeps its message's Kafka headers, for a dead-letter sink to
        # write back; SELECT does not show them (DESIGN §4 lists the table's columns).
        self.errs = [*parts.errs, *([F.col("headers")] if redirected else [])]
        self.logged = out.isin("errs", "dlq", "log")
        # Each kind's files hold only what its readers use: a row, an error, a key, a count.
        self.row = F.when(out == "oks", F.struct(*parts.oks)).alias("row")
        seen = F.when(out.isin("seen", "state"), F.col("__seen")) if upsert else F.lit(None).cast("long")
        self.keys = [
            F.col("partition").alias("__p"),
            F.col("offset").alias("__o"),
            seen.alias("__seen"),
            (F.when(out == "state", F.col("__ukey")) if upsert else F.lit(None).cast("binary")).alias("__k"),
        ]

    def __call__(self, messages: DataFrame, ingested_ms, standing: DataFrame | None = None) -> DataFrame:
        if self.changes is not None:
            if standing is None:  # its ingestion reads the state before every micro-batch
                raise InternalError.bug("an upsert source's micro-batch without its state")
            messages = self.changes(messages, standing)
        err = F.when(self.logged, F.struct(*self.errs, F.lit(ingested_ms).cast("long").alias("mz_timestamp")))
        return messages.select(self.exploded, "*").select(self.out, self.row, err.alias("err"), *self.keys)


def batch_rows(messages: DataFrame, item: Item, ingested_ms, standing: DataFrame | None = None) -> DataFrame:
    """`BatchRows` built for `messages` and applied to them."""
    return BatchRows(messages, item)(messages, ingested_ms, standing)


def write_batch(rows: DataFrame, path):
    """A micro-batch's `batch_rows`, written as Parquet under `path`, a folder per kind
    (recorded: the expression that writes them)."""
    return rows.write.partitionBy("__out").parquet(path)


def streaming(messages: DataFrame, commit, item: Item, checkpoint):
    """The source's streaming query, `commit(batch, n)` called with each micro-batch: started
    (a `StreamingQuery`), or, recorded, the expression that starts it."""
    return (
        messages.writeStream.foreachBatch(commit)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=TRIGGER)
        .queryName(f"sluice-source-{item.name}-{item.id}")
        .start()
    )


def start_over_hint(name: str) -> str:
    """What a user runs to read a source's topic from its start again: Materialize's answer
    to a topic recreated under a source, which never recovers by itself."""
    quoted = '"' + name.replace('"', '""') + '"'
    return (
        f"the source cannot recover: to read its topic from the start, run SHOW CREATE SOURCE {quoted}, "
        f"DROP SOURCE {quoted} CASCADE, then the CREATE SOURCE statement shown (and create again what "
        "CASCADE dropped)"
    )


def offsets_regressed(name: str, reason: str) -> SourceFailed:
    """The error of a source whose topic's offsets went back below its committed ones."""
    return SourceFailed(name, reason, recovers=False, hint=start_over_hint(name))


@dataclass
class Fault:
    """Why an ingestion is failed, and when its supervisor next restarts it (never, for a
    fault for good: `SourceFailed.recovers` false)."""

    reason: str
    restart_at: float
    delays: Iterator[float]
    since: float  # when it first failed for this reason, restarts failing again included
    recovers: bool = True


@dataclass
class Ingestion:
    item: Item
    store: Store
    spark: SparkSession
    catalog: Catalog
    # The snapshot read that fixes where a stream without commits starts, asked at every
    # start (its low watermarks bound what a repair may read again).
    read: Callable[[], SourceRead]
    query: StreamingQuery | None = None
    # The stream's messages as `ingested_messages` frames them, once started.
    messages: DataFrame | None = None
    # How its micro-batches become the rows of commits, built at the first.
    rows: BatchRows | None = None
    # Whether the store's batch-file schema is known to be saved (see `ensure_schema`).
    schema_saved: bool = False
    compactor: Compactor | None = None
    # While it commits a backlog: (its name, offsets committed, offsets to commit), for progress.
    backlog: tuple[str, int, int] | None = None
    fault: Fault | None = None
    stopped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Notified at every commit, counted in `commits`: a statement waiting to read its
    # writes wakes then.
    committed: threading.Condition = field(default_factory=threading.Condition)
    commits: int = 0

    @property
    def desc(self) -> SourceDesc:
        return self.item.source_desc

    @property
    def backlog_tag(self) -> str:
        """The Spark job tag of the batch jobs committing its backlog."""
        return f"sluice-backlog-{self.item.id}"

    def launch(self) -> None:
        """Start the stream (from its checkpoint, if it has one). A source fault on the
        way fails the ingestion, for its supervisor to restart, rather than the caller."""
        try:
            self.start()
        except SourceFailed as e:
            with self.lock:
                self._failed(e.reason, e.recovers)

    def start(self) -> None:
        activate(self.spark)  # on the session's thread, or the supervisor's restarting the stream
        desc = self.desc
        failed = self.store.failure()
        if failed is not None:
            raise offsets_regressed(self.item.name, failed)
        self._stop_compacting()  # the repair below may drop what it is compacting
        # Every start asks the store where to begin: it alone knows what was committed.
        read = self.read()
        starts = self.store.recover(
            self.item.name,
            {p: start for p, start, _ in read.ranges},
            desc.envelope != "none",
            lambda: dict(read.lows),
        )
        self.verify(dict(read.highs))
        self.compactor = Compactor(self.spark, self.store, desc.envelope != "none")
        starts = self._commit_backlog(starts, {p: end for p, _, end in read.ranges})
        start_offsets = json.dumps({str(p): start for p, start in starts.items()})
        committed = json.dumps({str(p): offset for p, offset in self.store.committed_offsets().items()})
        raw = stream_read(self.spark, self.item, self.catalog, start_offsets, committed)
        self.messages = ingested_messages(raw, desc)
        self.query = streaming(self.messages, self._commit, self.item, self.store.checkpoint.uri)

    def verify(self, highs: dict[int, int], committed: dict[int, int] | None = None) -> None:
        """Raise `SourceFailed` for good (recorded in the store, so every later start fails
        alike) if the topic's high watermarks `highs` went back below the committed offsets
        (the store's now, or `committed`, read before `highs` were asked): the topic was
        recreated, or lost data, and what it holds now below them would never be read —
        never taken for "caught up"."""
        reason = regression(self.store.committed_offsets() if committed is None else committed, highs)
        if reason is not None:
            self.store.fail(reason)
            raise offsets_regressed(self.item.name, reason)

    def _commit_backlog(self, starts: dict[int, int], ends: dict[int, int]) -> dict[int, int]:
        """Commit what the topic holds from `starts` up to `ends` with batch jobs, each
        reading at most `max_batch_messages` (as a micro-batch would), and return where the
        stream then starts. A batch job's first commit comes ~2 s sooner than a fresh
        stream's on two cores: Spark starts a streaming query's Python source in a Python
        process of its own, which it does while nobody waits for it once the backlog is
        committed. A fault fails the ingestion as the stream's would (`SourceFailed`)."""
        at = dict(starts)
        most = max_batch_messages()
        context = self.spark.sparkContext
        context.addJobTag(self.backlog_tag)  # `stop` cancels what it runs
        try:
            while not self.stopped:
                behind = {str(p): end for p, end in ends.items() if end > at.get(p, 0)}
                if not behind:
                    break
                self.backlog = progress(self.item.name, at, ends)
                upto = admitted({p: at.get(int(p), 0) for p in behind}, behind, most) if most > 0 else behind
                ranges = [[int(p), at.get(int(p), 0), to] for p, to in sorted(upto.items(), key=lambda i: int(i[0]))]
                offsets = {p: (o, o) for p, o in at.items()} | {p: (start, to) for p, start, to in ranges}
                try:
                    retried(lambda: self._commit_backlog_batch(ranges, offsets), retry_policy(self.item))
                except (PySparkException, Py4JJavaError) as e:
                    raise SourceFailed(self.item.name, self._reason(e)) from None
                except SourceUnavailable as e:
                    raise SourceFailed(self.item.name, e.reason) from None
                at.update({p: to for p, _, to in ranges})
        finally:
            context.removeJobTag(self.backlog_tag)
            self.backlog = None
        return at

    def _reason(self, error: BaseException) -> str:
        """Why `error` failed the ingestion (`failures.failure_reason`, naming its store's
        folder for a write that found the disk full)."""
        return failure_reason(error, str(self.store.root))

    def verify_running(self, highs: dict[int, int], committed: dict[int, int]) -> None:
        """`verify`, the stream stopped and the ingestion failed for good if it fails: the
        stream would read on from committed offsets the topic no longer has."""
        try:
            self.verify(highs, committed)
        except SourceFailed as e:
            with self.lock:
                self._stop_compacting()
                if self.query is not None:
                    self.query.stop()
                self._failed(e.reason, recovers=False)
            raise

    def _commit_backlog_batch(self, ranges: list[list[int]], offsets) -> None:
        raw = backlog_read(self.spark, self.item, self.catalog, json.dumps(ranges))
        self._commit_messages(ingested_messages(raw, self.desc), None, offsets)

    def ensure_schema(self) -> None:
        """Save the store's batch-file schema if it may not be saved yet: what reads and
        compaction read the files with. A commit saves it from the frame it writes first;
        a read before any commit of this stream reads what earlier streams wrote with the
        schema they saved, or, if none did (a topic with nothing to read yet), has it
        found here. Finding it takes the driver ~0.4 s: done while Spark starts the
        stream, it would delay the stream's first micro-batch by ~0.6 s."""
        if not self.schema_saved and not self.store.has_schema():
            if (messages := self.messages) is None:  # a statement reads the store of a stream it started
                raise InternalError.bug(f'the schema of source "{self.item.name}", whose stream never started')
            rows = self._rows_for(messages)(messages, 0, no_standing(self.spark))
            self.store.save_schema(rows.schema)
        self.schema_saved = True

    def _rows_for(self, messages: DataFrame) -> BatchRows:
        """The stream's `BatchRows`, built for `messages` (the stream's, or a micro-batch's:
        their columns are the same) when first needed."""
        if self.rows is None:
            self.rows = BatchRows(messages, self.item)
        return self.rows

    def _commit(self, batch: DataFrame, n: int) -> None:
        offsets = self.store.batch_offsets(n)
        if offsets is None:
            return  # run again after a restart: every offset it read is committed already
        self._commit_messages(batch, n, offsets)

    def _commit_messages(self, messages: DataFrame, n: int | None, offsets) -> None:
        """Commit `messages`, which read `offsets` (`{partition: (from, to)}`), as Spark's
        micro-batch `n` (None: a backlog's batch job)."""
        upsert = self.desc.envelope != "none"
        ingested_ms = int(time.time() * 1000)
        staging = self.store.root.temporary(f"batch-{'backlog' if n is None else n}-")
        written = staging / "out"
        # An upsert source's micro-batch reads its state: no compaction may remove it meanwhile.
        with self.store.reading() if upsert else contextlib.nullcontext():
            standing = self.store.standing(self.spark) if upsert else None
            rows = self._rows_for(messages)(messages, ingested_ms, standing)
            if not self.schema_saved:
                self.store.save_schema(rows.schema)
                self.schema_saved = True
            write_batch(rows, written.uri)
        self.store.commit(
            written,
            batch=n,
            ingested_ms=ingested_ms,
            offsets=offsets,
            redirected=self.desc.dead_letter_table is not None,
            upsert=upsert,
        )
        with self.committed:
            self.commits += 1
            self.committed.notify_all()
        staging.remove()
        compactor = self.compactor  # None once stopping
        if compactor is not None:
            # A micro-batch the admission bound did not cut short read all there was.
            most = max_batch_messages()
            compactor.poke(live=most <= 0 or sum(to - start for start, to in offsets.values()) < most)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.store.close()
            self.spark.sparkContext.cancelJobsWithTag(self.backlog_tag)
            self._stop_compacting()
            if self.query is not None:
                self.query.stop()
                self.query = None

    def _stop_compacting(self) -> None:
        if self.compactor is not None:
            self.compactor.stop()
            self.compactor = None

    def failure(self) -> SourceFailed | None:
        """Why the ingestion is failed, None while it runs. A restarted stream stays
        failed until it has got through a trigger (its first progress report): one still
        facing the fault is waiting it out in that trigger. A stream that stopped on its
        topic's offsets going backwards has failed for good (see `verify`)."""
        with self.lock:
            query = self.query
            if query is not None and not query.isActive:
                error = query.exception()
                reason = "the stream stopped" if error is None else self._reason(error)
                recovers = error is None or not raised_as(error, OffsetsRegressed)
                if not recovers:
                    self.store.fail(reason)
                self._failed(reason, recovers)
            elif self.fault is not None and query is not None and query.lastProgress is not None:
                self.fault = None
            fault = self.fault
        if fault is None:
            return None
        if fault.recovers:
            return SourceFailed(self.item.name, fault.reason)
        return offsets_regressed(self.item.name, fault.reason)

    def failed(self) -> SourceFailed | None:
        """Why a statement reading the source fails now: its `failure`, except Spark
        failing to start a Python worker (`WORKER_LATE`) for less than the source's RETRY
        TIMEOUT, which a statement waits out for the restarted stream (None)."""
        failure = self.failure()
        if failure is None or failure.reason != WORKER_LATE:
            return failure
        with self.lock:
            since = self.fault.since if self.fault is not None else None
        if since is None:
            return None  # recovered meanwhile
        policy = retry_policy(self.item)
        if time.monotonic() - since < policy.timeout:
            return None
        return SourceFailed(self.item.name, policy.exhausted(WORKER_LATE).reason)

    def _failed(self, reason: str, recovers: bool = True) -> None:
        self.query = None
        now, fault = time.monotonic(), self.fault
        delays = fault.delays if fault is not None else retry_policy(self.item).delays()
        since = fault.since if fault is not None and fault.reason == reason else now
        restart_at = now + next(delays) if recovers else float("inf")
        self.fault = Fault(reason, restart_at, delays, since, recovers)

    def supervise(self) -> None:
        """Restart the stream if it has failed and its backoff delay has passed. Starting
        happens outside the lock: its backlog's batch jobs, or a fresh stream's first read,
        may wait out a fault."""
        if self.failure() is None or self.stopped or self.query is not None:
            return
        if (fault := self.fault) is None or time.monotonic() < fault.restart_at:  # None: recovered meanwhile
            return
        try:
            self.launch()
        except Exception as e:  # noqa: BLE001 - whatever stops a restart fails the ingestion
            with self.lock:
                self._failed(self._reason(e))
        with self.lock:
            if self.stopped and self.query is not None:  # stopped while restarting
                self.query.stop()
                self.query = None
