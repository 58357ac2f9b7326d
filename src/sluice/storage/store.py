"""A continuously ingested source's committed micro-batches on disk: committing them,
checking them, reading them back as a `Collection`, and repairing a damaged store.

Layout of `<data>/streams/<source id>/`, `<data>` the data directory or a data URI's
folder (`storage`: every file goes through its `Location`, Spark's reads, writes and
checkpoint through the same URIs):

    checkpoint/                         Spark's: the offsets its micro-batches read
    batches/<k>/__out=<kind>/*.parquet  what commit k holds, one kind per folder
    commits/<k>.json                    commit k's record, written last: a commit is
                                        visible only once its record exists
    compacted/<k>/__out=<kind>/*.parquet  the base: commits 0 to k compacted
    compacted/<k>.json                  the base's record, written last
    schema.json                         the schema of the batch files
    failed.json                         why the source failed for good, if it did: its
                                        topic's offsets went back below the committed ones

Kinds: `oks` (rows; for an upsert source, rows entering its state), `errs` (errors a query
fails with; upsert: entering its state), `retract` (upsert: `(__p, __o)` of messages that
left the state), `dlq` (dead-letter rows), `log` (upsert: every error message, for the
tolerance count), `skip` (ENVELOPE NONE messages without key and value), `seen` (upsert:
messages per key and batch of a key that entered nothing, a tombstone's), `state` (upsert:
`(__k, __p, __o)`, the key and place of each message entering its state, and `__seen`, its
key's messages in the batch). An upsert source's state is what its commits leave: the
`state` rows no commit retracted (`standing`). Because the source's rows, its errors and its dead-letter rows
of one micro-batch sit under one commit record, a restart never shows one without the other.

Commits are numbered by the store (0, 1, …), apart from Spark's batch ids. A record lists
the files its commit wrote (path, bytes, rows, CRC-32) and the Kafka offsets it covers per
partition, `[from, to)`; each commit starts where the one before it ended. The store's
committed offsets — where its last commit ends — decide what was ingested, not Spark's
checkpoint: a micro-batch Spark runs again (after a restart, or from an older checkpoint)
reads and commits only what lies past them, and a stream whose checkpoint is gone starts
from them. Files and folders are fsynced before the record that makes them visible is written.

A read uses only the files the records list, and checks each one (size, CRC-32; a check
holds while the file's stat is unchanged). It leaves out an upsert source's retracted rows
by joining them with the `retract` rows or, when its commits retract few, by a filter of
their places, read on the driver (`unretracted`): a join costs a Spark job of its own.
A store is damaged when a record is missing or unreadable, a commit does not start where
the one before it ended, a listed file is missing, resized or fails its checksum, or the
checkpoint has read past the last commit.
Damage is repaired from Kafka when the stream starts (a read that finds damage restarts
the stream first), provided Kafka still holds every offset the repair reads again: the
first damaged commit and every commit after it are dropped, the checkpoint is discarded,
and the stream reads again from where the last sound commit ended (an upsert source's
state is then what the sound commits leave). A lost or unreadable checkpoint
alone loses nothing: the stream starts from the committed offsets. An upsert store an
older sluice wrote, whose state was in Spark's checkpoint, is rebuilt from the source's
start.

When Kafka no longer holds those offsets the store is left as it is, and every read of the
source fails with `StoreDamaged` (XX001) naming the commit and the file. Staging folders of
batches that never committed are removed when a stream starts.

"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sluice.catalog.items import Item
from sluice.spark.pyspark_code import F
from sluice.storage.caches import StoreCaches
from sluice.storage.location import Location, remove_all
from sluice.storage.records import (
    FILE_FIELDS,
    KINDS,
    Damage,
    Inspection,
    Offsets,
    Ranges,
    Totals,
    ahead,
    ends,
    files_of,
    last_number,
    numbered_records,
    read_past,
    seal,
)
from sluice.storage.source import Collection
from sluice.storage.stored import (
    IDENTITY,
    STATE_SCHEMA,
    StoredCollection,
    Unretracted,
    stored_standing,
    without_places,
)

# Up to this many retractions are applied as a filter of their places, read on the
# driver, rather than by a join: a join with them costs a Spark job of its own (their
# broadcast) in every SELECT and upsert micro-batch.
FILTERED_RETRACTIONS = 1_000

READ_AGAIN = (
    "the next statement that reads the source restarts its ingestion, which re-reads the damaged "
    "commits from Kafka"
)
UNRECOVERABLE = (
    "restore the source's folder under streams/ from a backup, or drop the source and create "
    "it again to ingest what its topic still holds"
)

class Store:
    """`caches`: what reads remember across statements (the session's, from its controller)."""

    def __init__(self, root: Location, caches: StoreCaches | None = None) -> None:
        self.root = root
        self.caches = caches if caches is not None else StoreCaches()
        self.checkpoint = root / "checkpoint"
        self.batches = root / "batches"
        self.commits = root / "commits"
        self.compacted = root / "compacted"
        # The writer's, set by `recover`: the source's name, where its stream starts, and
        # its last commit. `close` stops it from committing once its stream is stopping.
        self.source = ""
        self.start: Offsets = {}
        self.head: dict | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._reads = 0  # the reads `collection` began, ended by `release`

    def exists(self) -> bool:
        return self.checkpoint.exists() or self.commits.exists()

    def committed(self) -> list[int]:
        """The numbers of the commit records on disk."""
        return numbered_records(self.commits)

    def bases(self) -> list[int]:
        """The commit numbers of the base records on disk (see compaction above)."""
        return numbered_records(self.compacted)

    def last_commit(self) -> dict | None:
        """The record of the highest-numbered commit, or of a base reaching further (None
        if there is none or it is unreadable)."""
        committed, bases = self.committed(), self.bases()
        try:
            if bases and (not committed or bases[-1] > committed[-1]):
                return self._record(bases[-1], self.compacted)
            return self._record(committed[-1], self.commits) if committed else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def totals(self) -> Totals:
        last = self.last_commit()
        return Totals(**last["totals"]) if last else Totals()

    def committed_offsets(self) -> Offsets:
        """`{partition: next offset}` the store has committed: what the stream has ingested."""
        last = self.last_commit()
        return ends(last) if last else {}

    def fail(self, reason: str) -> None:
        """Record that the source failed for good, for `reason`: every start of its stream,
        in this session or a later one, fails with it (see `failure`)."""
        (self.root / "failed.json").replace(json.dumps({"reason": reason}).encode())

    def failure(self) -> str | None:
        """Why the source failed for good (`fail`), or None."""
        try:
            return json.loads((self.root / "failed.json").read_text())["reason"]
        except FileNotFoundError:
            return None

    def has_schema(self) -> bool:
        return (self.root / "schema.json").exists()

    def save_schema(self, schema: StructType) -> None:
        (self.root / "schema.json").replace(schema.json().encode())

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads((self.root / "schema.json").read_text()))

    def _schema_fields(self) -> list[str]:
        try:
            return self.schema().fieldNames()
        except (OSError, ValueError):
            return []

    # -- checking --------------------------------------------------------------------

    def inspect(self) -> Inspection:
        """The commits in order up to the first damaged one, and what is wrong with it: the
        newest base first, if there is one, standing for the commits it compacted."""
        with self.reading():
            return self._inspect()

    def _inspect(self) -> Inspection:
        records: list[dict] = []
        bases = self.bases()
        if bases:
            base = bases[-1]
            what = f"the compaction of commits 0 to {base}"
            try:
                record = self._record(base, self.compacted)
            except (OSError, ValueError, KeyError, TypeError):
                return Inspection([], Damage(f'{what}: its record "compacted/{base}.json" is unreadable'))
            fault = self._fault(record, None)
            if fault is not None:
                return Inspection([], Damage(f"{what}: {fault}"))
            records.append(record)
        committed = self.committed()
        for number in range(bases[-1] + 1 if bases else 0, committed[-1] + 1 if committed else 0):
            name = f"commits/{number}.json"
            try:
                record = self._record(number, self.commits)
            except FileNotFoundError:
                return Inspection(records, Damage(f'commit {number}: its record "{name}" is missing'))
            except (OSError, ValueError, KeyError, TypeError):
                return Inspection(records, Damage(f'commit {number}: its record "{name}" is unreadable'))
            fault = self._fault(record, records[-1] if records else None)
            if fault is not None:
                return Inspection(records, Damage(f"commit {number}: {fault}"))
            records.append(record)
        return Inspection(records, None)

    def sound(self) -> bool:
        """Whether a running writer's store needs no repair: no damage, and a checkpoint
        that has not read past the last commit (its stream commits here first)."""
        # The checkpoint first: its stream may commit here, then there, in between.
        try:
            done, _ = self.checkpoint_position()
        except (OSError, ValueError, IndexError):
            return False
        inspection = self.inspect()
        return inspection.damage is None and self.checkpoint.exists() and not ahead(done, inspection.end)

    def _record(self, number: int, folder: Location) -> dict:
        """The record of commit `number` (of its base, from `compacted/`), checked."""
        path = folder / f"{number}.json"
        _, key = path.stat()
        cached = self.caches.records.get(path.path)
        if cached is not None and cached[0] == key:
            return cached[1]
        record = json.loads(path.read_text())
        offsets = record["offsets"]
        if record["commit"] != number or not all(
            len(r) == 2 and all(isinstance(o, int) for o in r) for r in offsets.values()
        ):
            raise ValueError(f"not the record of commit {number}")
        if not all(FILE_FIELDS <= entry.keys() for entry in record["files"]):
            raise ValueError("a file entry lacks a field")
        self.caches.records[path.path] = (key, record)
        return record

    def _fault(self, record: dict, previous: dict | None) -> str | None:
        number = record["commit"]
        if previous is not None:
            for partition, end in ends(previous).items():
                start = record["offsets"].get(str(partition), (None,))[0]
                if start != end:
                    return (
                        f"it does not start where commit {number - 1} ended "
                        f"(partition {partition}: offset {start}, not {end})"
                    )
        for entry in record["files"]:
            fault = self._file_fault(entry)
            if fault is not None:
                return fault
        return None

    def _file_fault(self, entry: dict) -> str | None:
        name = entry["path"]
        path = self.root / name
        try:
            size, key = path.stat()
            if size != entry["bytes"]:
                return f'file "{name}" has {size} bytes, not the {entry["bytes"]} written'
            if self.caches.checked.get(path.path) != key:
                if path.crc32() != entry["crc32"]:
                    return f'file "{name}" does not match its checksum'
                self.caches.checked[path.path] = key
        except FileNotFoundError:
            return f'file "{name}" is missing'
        except OSError as e:
            return f'file "{name}" cannot be read: {e.strerror or e}'
        return None

    # -- Spark's checkpoint ----------------------------------------------------------

    def checkpoint_position(self) -> tuple[Offsets | None, Offsets | None]:
        """Where Spark's checkpoint stands: the end offsets of its last committed
        micro-batch, and of a later one it planned and will run again (None: none).
        Raises OSError or ValueError when the checkpoint cannot be read."""
        done = last_number(self.checkpoint / "commits")
        planned = last_number(self.checkpoint / "offsets")
        done_at = None if done is None else self.spark_offsets(done)
        if done is not None and done_at is None:
            raise ValueError(f"no offsets for committed micro-batch {done}")
        return done_at, (self.spark_offsets(planned) if planned not in (None, done) else None)

    def spark_offsets(self, batch: int) -> Offsets | None:
        """The end offsets of Spark's micro-batch `batch`, from its offset log (None if gone)."""
        try:
            lines = (self.checkpoint / "offsets" / str(batch)).read_text().splitlines()
        except FileNotFoundError:
            return None
        return {int(p): int(offset) for p, offset in json.loads(lines[-1]).items()}

    # -- writing ---------------------------------------------------------------------

    def recover(self, source: str, origin: Offsets, upsert: bool, lows: Callable[[], Offsets]) -> Offsets:
        """Make the store and the checkpoint agree before the writer's stream starts (see
        the module docstring); returns where a stream without a checkpoint starts. `origin`
        is where the source starts reading its topic, `lows` gives the topic's low
        watermarks. Raises `StoreDamaged`, changing nothing, when the repair would read
        again offsets Kafka no longer holds."""
        self.source = source
        leftovers = [
            *self.root.children("batch-*"),
            *self.root.children("compaction-*"),
            *self.root.children("checkpoint.discarded"),
            *self.commits.children(".*"),
            *self.compacted.children(".*"),
            # Spark's own of a log entry it failed to write (a full disk): left, they stop
            # its stream from starting at batch 0 again.
            *(self.checkpoint / "offsets").children(".*.tmp*"),
            *(self.checkpoint / "commits").children(".*.tmp*"),
        ]
        remove_all(leftovers)
        inspection = self.inspect()
        try:
            done, _ = self.checkpoint_position()
            readable = True
        except (OSError, ValueError, IndexError):
            done = None
            readable = False
        damage = inspection.damage or read_past(done, {**origin, **inspection.end})
        keep = inspection.records
        if upsert and keep and "__k" not in self._schema_fields():
            damage = Damage("its upsert state is in the layout of an older sluice, which kept it in the checkpoint")
            keep = []
        discard = damage is not None or not readable
        start = {**origin, **(ends(keep[-1]) if keep else {})}
        if damage is not None:
            deleted = {p: low for p, low in lows().items() if low > start.get(p, 0)}
            if deleted:
                raise damage.error(
                    source,
                    detail="Kafka no longer holds what the repair must read again: "
                    + ", ".join(
                        f"partition {p} from offset {start.get(p, 0)} (its first offset is now {low})"
                        for p, low in sorted(deleted.items())
                    ),
                    hint=UNRECOVERABLE,
                )
        if discard and self.checkpoint.exists():
            # Renamed first: a half-deleted checkpoint is never taken for a whole one.
            discarded = self.root / "checkpoint.discarded"
            self.checkpoint.move_to(discarded)
            discarded.remove()
        self._truncate(keep[-1]["commit"] + 1 if keep else 0)
        self.head = keep[-1] if keep else None
        self.start = start
        return start

    def _truncate(self, keep: int) -> None:
        """Drop every commit and base numbered `keep` or more — records first, the highest
        first, so that a crash leaves a run of commits — and every folder no record lists."""
        for records, folder in ((self.commits, self.batches), (self.compacted, self.compacted)):
            dropped = [n for n in reversed(numbered_records(records)) if n >= keep]
            for number in dropped:
                (records / f"{number}.json").remove()
            if dropped:
                records.sync()
            names = {f: f.name.removesuffix(".json") if folder == records else f.name for f in folder.children()}
            remove_all([f for f, name in names.items() if not (name.isdigit() and int(name) < keep)])

    def batch_offsets(self, batch: int) -> Ranges | None:
        """What Spark's micro-batch `batch` adds to the store: per partition `[from, to)`,
        from the committed offsets on (a micro-batch of an older checkpoint begins below
        them, and the reader reads from them: see its `start_offsets`). None when it adds
        nothing (a micro-batch run again). Raises `StoreDamaged` when the micro-batch
        began past the committed offsets."""
        end = self.spark_offsets(batch)
        if end is None:
            raise ValueError(f"Spark's offset log has no micro-batch {batch}")
        committed = ends(self.head) if self.head else {}
        # Spark's first micro-batch begins where the stream was told to start.
        began = (self.spark_offsets(batch - 1) if batch > 0 else None) or self.start
        froms = {p: committed.get(p, began.get(p, 0)) for p in {*end, *committed}}
        ranges = {p: (froms[p], max(froms[p], end.get(p, froms[p]))) for p in froms}
        if all(start == to for start, to in ranges.values()):
            return None
        began = {p: began.get(p, froms[p]) for p in end}
        # Past the committed offsets, what lies between was never committed.
        wrong = sorted(p for p in end if began[p] > froms[p])
        if wrong:
            raise Damage(
                f"micro-batch {batch} of its checkpoint does not start at its committed offsets ("
                + ", ".join(f"partition {p}: offset {began[p]}, committed {froms[p]}" for p in wrong)
                + ")"
            ).error(self.source, hint=READ_AGAIN)
        return ranges

    def commit(
        self, written: Location, *, batch: int | None, ingested_ms: int, offsets: Ranges, redirected: bool, upsert: bool
    ) -> None:
        """Publish a written batch as the next commit (of Spark's micro-batch `batch`; None:
        a backlog's batch job): its files fsynced and listed, moved into place, then its
        record written."""
        number = self.head["commit"] + 1 if self.head else 0
        prefix = f"batches/{number}"
        files = seal(written, prefix)
        counts = {kind: sum(f["rows"] for f in files if f["kind"] == kind) for kind in KINDS}
        # How many messages each key had: on its `state` row, or a `seen` row of its own.
        counts["seen"] = sum(
            pc.sum(path.read_parquet(["__seen"]).column(0)).as_py() or 0
            for kind in ("seen", "state")
            for path in (written / f"__out={kind}").children("*.parquet")
        )
        before = Totals(**self.head["totals"]) if self.head else Totals()
        errors = counts["dlq"] + (counts["log"] if upsert else counts["errs"])
        messages = counts["seen"] if upsert else sum(counts[kind] for kind in ("oks", "errs", "dlq", "skip"))
        totals = Totals(
            before.messages + messages,
            before.errors + errors,
            before.dead_lettered + (counts["dlq"] if redirected else 0),
            ingested_ms if errors else before.last_error_ms,
        )
        record = {
            "commit": number,
            "batch": batch,
            "ingested_ms": ingested_ms,
            "offsets": {str(p): list(r) for p, r in sorted(offsets.items())},
            "files": files,
            "counts": counts,
            "totals": totals.__dict__,
        }
        target = self.root / prefix
        with self._lock:
            if self._closed:
                raise RuntimeError(f'the ingestion of source "{self.source}" was stopped before it committed')
            if not self._head_intact():
                name = f"commits/{number - 1}.json"
                raise Damage(f'commit {number - 1}: its record "{name}" vanished or changed').error(
                    self.source, hint=READ_AGAIN
                )
            target.remove()  # left by an attempt that died before its record was written
            self.batches.make_dirs()
            written.move_to(target)
            self.batches.sync()
            (self.commits / f"{number}.json").replace(json.dumps(record).encode())
            self.head = record
        for entry in files:  # hashed just now
            path = self.root / entry["path"]
            self.caches.checked[path.path] = path.stat()[1]

    def _head_intact(self) -> bool:
        """Whether the writer's last commit is still on disk as it wrote it."""
        folder = self.compacted if self.head is not None and self.head.get("base") else self.commits
        try:
            return self.head is None or self._record(self.head["commit"], folder) == self.head
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def close(self) -> None:
        """Commit nothing more: the writer's stream is being stopped."""
        with self._lock:
            self._closed = True

    # -- reading ---------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """While inside, no compaction removes a file of this store."""
        self._begin_read()
        try:
            yield
        finally:
            self._end_read(1)

    def _begin_read(self) -> None:
        self.caches.begin_read(str(self.root))

    def _end_read(self, reads: int) -> None:
        self.caches.end_read(str(self.root), reads)

    def release(self) -> None:
        """End the reads `collection` began: their queries have run."""
        self._end_read(self._reads)
        self._reads = 0

    def remove_unread(self, obsolete: Callable[[], list[Location]]) -> bool:
        """Remove the files `obsolete` names if no read is using the store (they are
        listed and removed while none can begin), and forget them; whether it did."""

        def remove() -> list[str]:
            locations = obsolete()
            remove_all(locations)
            return [str(location) for location in locations]

        return self.caches.remove_unread(str(self.root), remove)

    def frame(self, spark: SparkSession, records: list[dict], kind: str, schema: StructType | None = None) -> DataFrame:
        """The files of one kind of `records`, in `schema` (the batch files', by default)."""
        schema = schema or self.schema()
        paths = [(self.root / f["path"]).uri for f in files_of(records, kind)]
        # Without paths too: an empty frame this way costs no RDD, unlike createDataFrame([]);
        # as `limit(0)`, Spark's optimizer drops the joins and unions it would empty.
        frame = spark.read.schema(schema).parquet(*paths)
        return frame if paths else frame.limit(0)

    def unretracted(self, records: list[dict]) -> Unretracted | None:
        """What leaves out the rows `records` retract, when they retract few: a filter of
        their places (`without_places`); None when they retract many."""
        if not few_retractions(records):
            return None
        places: dict[int, list[int]] = {}
        for file in files_of(records, "retract"):
            table = (self.root / file["path"]).read_parquet(IDENTITY)
            for partition, offset in zip(table.column("__p").to_pylist(), table.column("__o").to_pylist()):
                places.setdefault(partition, []).append(offset)
        return lambda rows: without_places(rows, places)

    def standing(self, spark: SparkSession) -> DataFrame:
        """An upsert source's state as its commits leave it: `(__k, __p, __o)`, the key and
        place of every key's winning message (the `state` rows no commit retracted). Read
        it inside `reading`."""
        inspection = self.inspect()
        if inspection.damage is not None:
            raise inspection.damage.error(self.source, hint=READ_AGAIN)
        records = inspection.records
        return stored_standing(
            lambda kind: self.frame(spark, records, kind, STATE_SCHEMA), self.unretracted(records)
        )

    def _sound_read(self, item: Item) -> Inspection:
        """Begin a read (ended by `release`) of the store, which must not be damaged."""
        self._begin_read()
        self._reads += 1
        inspection = self.inspect()
        if inspection.damage is not None:
            raise inspection.damage.error(item.name, hint=READ_AGAIN)
        return inspection

    def collection(self, spark: SparkSession, item: Item) -> Collection:
        """The source's committed rows, errors and logs; the files stay until `release`."""
        records = self._sound_read(item).records
        key = (spark, item, str(self.root), tuple(f["path"] for r in records for f in r["files"]))
        return self.caches.collection(
            key,
            lambda: StoredCollection(
                item,
                lambda kind: self.frame(spark, records, kind),
                self.unretracted(records),
                lambda kind: any(files_of(records, kind)),
            ),
        )

    def dead_letters_since(self, spark: SparkSession, item: Item, since: Offsets) -> tuple[DataFrame, Offsets]:
        """The dead-letter rows of the commits reaching past `since` (`{partition: next
        offset}`) whose messages lie past it, and where the commits read end; the files
        stay until `release`. Only commits with new offsets are read: a dead-letter table
        is append-only, and its rows carry their message's place."""
        inspection = self._sound_read(item)
        records = [r for r in inspection.records if any(to > since.get(p, 0) for p, to in ends(r).items())]
        rows = self.frame(spark, records, "dlq").select("err.*")
        new = F.lit(True)
        for partition, offset in since.items():
            new = new & ((F.col("partition") != partition) | (F.col("offset") >= offset))
        return rows.where(new), inspection.end


def few_retractions(records: list[dict]) -> bool:
    """Whether `records` retract few enough rows for a read to filter them out by place
    (`FILTERED_RETRACTIONS`); read by `Store.unretracted` and by compaction, which makes
    them few again."""
    return sum(f["rows"] for f in files_of(records, "retract")) <= FILTERED_RETRACTIONS
