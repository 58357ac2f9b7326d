"""What a sink delivered, and a step's changes found by diffing its relation against it.

**How changes are computed.** A sink's relation may be a table, a source, a dead-letter
table or a view over them; none of these is a Spark streaming query whose output is a
change stream (a view is evaluated at read time over its sources' committed batches, a
table is a file replaced per statement). So a sink works as SUBSCRIBE does: each time
what the relation reads changes (a source commits a micro-batch, a table is written) it
evaluates the relation and diffs it against what it last delivered — and the diff runs on
Spark, so that a step costs the driver and Kafka O(change), not O(relation):

* each row is encoded on the executors into two byte strings, its *identity* and its
  *payload* (`SinkEnvelope.shape`; JSON in the JVM, other formats by an Arrow-batched
  Python UDF over the format registry's encoders — one encoder per format, whatever writes
  it);
* the delivered state is Parquet, `(identity, payload, count)`, under the sink's folder,
  `state/<version>/`. A step groups the relation's pairs by identity together with the
  state of the last committed version (one shuffle: both sides are unioned, tagged, so
  each group holds the new and the delivered payload and count), in one Spark job
  writing the next version's state through Spark's Parquet writer (so it goes where the
  sink's folder is, a data URI included; the driver marks the version `complete` before
  its transaction): every group, each marked whether the driver wants it — an identity
  whose payload or count differ (plus, for the checks, a key held by two rows and rows a
  guard flags), each in a folder of its kind — the state being the groups still held
  (count > 0);
* the wanted groups' folder alone is read back to the driver as Arrow, which works out
  each one's change; the driver builds the messages of those alone.

A relation and a state of at most `SMALL` (1,000) rows are grouped on the driver instead,
by Arrow with the same rules: a Spark shuffle costs more than that many pairs, and sinks
over small tables are the common case of tests and demos. A step finds out by collecting
at most `SMALL + 1` rows of the relation.

Two designs were weighed. Deltas from the store's commits (a commit's rows and retractions
are the change of a source, so a view linear over one source could sink each commit's
rows alone) would make Spark's part O(change) too, but they serve only sources and views
that are filters and projections of one source, not tables (a file replaced per
statement), joins or aggregates, and the unique-key check needs the delivered keys anyway.
The diff on Spark serves every relation with one mechanism and keeps the driver and Kafka
at O(change); its Spark cost per step is a scan and a shuffle of the relation, which
Spark runs on every core. A dead-letter table, append-only and whose rows carry their
message's place, reads only the commits past what it delivered (`dead_letter`).
What a step over a large relation still costs is Spark's: evaluating it, encoding it
(the Python UDF for columns the JVM cannot write with the encoder's bytes, such as
doubles), and the shuffle — `Status.seconds` shows the parts of the last step, and
`bench/sink.py` prints them.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from sluice.errors import StoreDamaged
from sluice.spark.pyspark_code import F
from sluice.storage.location import Location
from sluice.storage.sink.changes import Changes


class SinkState:
    """What a sink delivered: `(identity, payload, count)` at each committed version, as
    Parquet under `<sink dir>/state/<version>/` — the rows whose count is above 0; a step
    on Spark writes every group, the wanted ones under `wanted=true/` with what was
    delivered before, the others under `wanted=false/` — and `complete` once every part
    is there, before the version's commit (see the module docstring)."""

    def __init__(self, root: Location) -> None:
        self.dir = root / "state"

    def path(self, version: int) -> Location:
        return self.dir / str(version)

    def upgrade(self, version: int) -> None:
        """Rewrite the state of `version` an older sluice kept as one Arrow file
        (`<version>.arrow`) as this layout's folder; the file goes once the folder is
        complete, so a crash in between leaves a state either layout reads."""
        legacy = self.dir / f"{version}.arrow"
        if version == 0 or not legacy.exists():
            return
        target = self.path(version)
        if not (target / COMPLETE).exists():
            try:
                table = pa.ipc.open_file(pa.BufferReader(legacy.read_bytes())).read_all().select(list(_ARROW_STATE))
            except (OSError, pa.ArrowInvalid) as e:
                raise self._damaged(version, e) from None
            target.remove()
            target.make_dirs()
            _write_part(table, target / "part-0.parquet")
            _complete(target)
        legacy.remove()

    def _damaged(self, version: int, error: Exception | str) -> StoreDamaged:
        return StoreDamaged(
            f"the state of the sink's committed version {version} is damaged: {error}",
            hint="DROP SINK and CREATE SINK again write the relation's whole contents anew",
        )

    def _files(self, version: int) -> list[Location]:
        """The Parquet parts of the (complete) state of `version`: in its folder, or in
        the `wanted=…` folders of a step on Spark."""
        path = self.path(version)
        if not (path / COMPLETE).exists():
            raise self._damaged(version, f'folder "{path}" is missing or incomplete')
        folders = [path, *path.children("wanted=*")]
        return [part for folder in folders for part in folder.children("part-*.parquet")]

    def _held(self, version: int) -> int:
        """At most how many identities the state of `version` holds (the rows of its parts'
        footers, which count the wanted groups a step on Spark no longer holds too)."""
        if version == 0:
            return 0
        return sum(f.parquet_rows() for f in self._files(version))

    def delivered(self, version: int) -> pa.Table:
        """`(identity, payload, count)` of what version `version` delivered, on the driver."""
        empty = pa.table({name: pa.array([], arrow_type) for name, arrow_type in _ARROW_STATE.items()})
        if version == 0:
            return empty
        parts = [f.read_parquet(list(_ARROW_STATE)) for f in self._files(version)]
        held = pa.concat_tables([empty, *parts], promote_options="default")
        return held.filter(pc.greater(held.column("count"), 0))

    def _delivered(self, spark: SparkSession, version: int) -> DataFrame | None:
        """`(identity, payload, count)` of what version `version` delivered, on Spark (None: nothing)."""
        if version == 0:
            return None
        files = [f.uri for f in self._files(version)]
        return spark.read.schema(_STATE_SCHEMA).parquet(*files).where(F.col("count") > 0) if files else None

    def diff(self, frame: DataFrame, version: int, flags: list[str], unique: bool) -> Changes:
        """Write the state of `version + 1` from `frame` — the relation's `identity`,
        `payload` and guard `flags` columns — and return how it differs from `version`'s.
        A relation and a state both of at most `SMALL` rows are diffed on the driver, in
        Arrow (a Spark shuffle costs more than that); any other on Spark."""
        target = self.path(version + 1)
        target.remove()  # what an earlier attempt at this version left
        target.make_dirs()
        began = time.perf_counter()
        if self._held(version) <= SMALL:
            probe = frame.limit(SMALL + 1).toArrow()
            if probe.num_rows <= SMALL:
                changes = self._diff_here(probe, version, flags, unique, target)
                changes.seconds = {"diffed on the driver": time.perf_counter() - began}
                return changes
        changes = self._diff_on_spark(frame, version, flags, unique, target)
        changes.seconds = {"diffed on Spark": time.perf_counter() - began}
        return changes

    def _diff_here(self, rows: pa.Table, version: int, flags: list[str], unique: bool, target: Location) -> Changes:
        delivered = self.delivered(version)
        binary, counted = pa.binary(), pa.int64()
        width, held = rows.num_rows, delivered.num_rows
        tagged = pa.concat_tables(
            [
                pa.table(
                    {
                        "identity": rows.column("identity"),
                        "payload": rows.column("payload"),
                        "count": pa.array([1] * width, counted),
                        "was_payload": pa.nulls(width, binary),
                        "was_count": pa.array([0] * width, counted),
                        **{f: rows.column(f) for f in flags},
                    }
                ),
                pa.table(
                    {
                        "identity": delivered.column("identity"),
                        "payload": pa.nulls(held, binary),
                        "count": pa.array([0] * held, counted),
                        "was_payload": delivered.column("payload"),
                        "was_count": delivered.column("count"),
                        **{f: pa.array([False] * held) for f in flags},
                    }
                ),
            ],
            promote_options="permissive",  # a flag column of the relation may be NOT NULL
        )
        aggregates = [(c, "max") for c in ("payload", "was_payload")] + [(c, "sum") for c in ("count", "was_count")]
        grouped = tagged.group_by("identity").aggregate(aggregates + [(f, "max") for f in flags])
        grouped = grouped.rename_columns(["identity" if n == "identity" else n.rsplit("_", 1)[0] for n in grouped.column_names])
        state = grouped.filter(pc.greater(grouped.column("count"), 0)).select(["identity", "payload", "count"])
        _write_part(state, target / "part-0.parquet")
        _complete(target)
        return _changes(grouped, flags, unique, received=width + held)

    def _diff_on_spark(self, frame: DataFrame, version: int, flags: list[str], unique: bool, target: Location) -> Changes:
        """The relation's pairs and the delivered state grouped by identity, written as
        the new state in one Spark job, in two folders by whether the driver wants a group
        (changed, a duplicate key, or flagged): `wanted=true` alone is read back, O(change)."""
        binary, counted = T.BinaryType(), T.LongType()
        rows = frame.select(
            "identity",
            "payload",
            F.lit(1).cast(counted).alias("count"),
            F.lit(None).cast(binary).alias("was_payload"),
            F.lit(0).cast(counted).alias("was_count"),
            *flags,
        )
        delivered = self._delivered(frame.sparkSession, version)
        if delivered is not None:
            rows = rows.unionByName(
                delivered.select(
                    "identity",
                    F.lit(None).cast(binary).alias("payload"),
                    F.lit(0).cast(counted).alias("count"),
                    F.col("payload").alias("was_payload"),
                    F.col("count").cast(counted).alias("was_count"),
                    *(F.lit(False).alias(f) for f in flags),
                )
            )
        grouped = rows.groupBy("identity").agg(
            *(F.max(c).alias(c) for c in ("payload", "was_payload")),
            *(F.sum(c).alias(c) for c in ("count", "was_count")),
            *(F.max(f).alias(f) for f in flags),
        )
        count, was = F.col("count"), F.col("was_count")
        changed = (count != was) | ~F.col("payload").eqNullSafe(F.col("was_payload"))
        wanted = changed | (count > 1) if unique else changed
        for flag in flags:
            wanted = wanted | F.col(flag)
        marked = grouped.withColumn("wanted", wanted).withColumn(
            "was_payload", F.when(F.col("wanted"), F.col("was_payload"))
        )
        marked.write.mode("overwrite").partitionBy("wanted").parquet(target.uri)
        wanted_parts = [f.uri for f in (target / "wanted=true").children("part-*.parquet")]
        found = frame.sparkSession.read.schema(marked.drop("wanted").schema).parquet(*wanted_parts).toArrow()
        _complete(target)
        return _changes(found, flags, unique, received=found.num_rows)

    def keep_only(self, version: int) -> None:
        for path in self.dir.children():
            if path.name != str(version):
                path.remove()


# The largest relation (and delivered state) a step diffs on the driver.
SMALL = 1000

_STATE_SCHEMA = T.StructType(
    [
        T.StructField("identity", T.BinaryType()),
        T.StructField("payload", T.BinaryType()),
        T.StructField("count", T.LongType()),
    ]
)


# Written last into a state's folder: every part of it is there and fsynced.
COMPLETE = "complete"


def _write_part(table: pa.Table, path: Location) -> None:
    """`table` as the Parquet file `path`, written crash-safely."""
    out = pa.BufferOutputStream()
    pq.write_table(table, out)
    path.replace(out.getvalue().to_pybytes())


def _complete(folder: Location) -> None:
    for part in folder.children("part-*.parquet"):
        part.sync()
    folder.sync()
    (folder / COMPLETE).replace(b"")


_ARROW_STATE = {"identity": pa.binary(), "payload": pa.binary(), "count": pa.int64()}


def _changes(found: pa.Table, flags: list[str], unique: bool, received: int) -> Changes:
    """The changes of the rows a step wanted (see `SinkState.diff`), worked out by Arrow:
    an identity new or gone, a payload replaced, or a row held more or fewer times."""
    payload, was_payload = found.column("payload"), found.column("was_payload")
    count, was = found.column("count"), found.column("was_count")
    same = pc.or_(pc.fill_null(pc.equal(payload, was_payload), False), pc.and_(payload.is_null(), was_payload.is_null()))
    differs = pc.and_(pc.invert(same), pc.and_(pc.greater(count, 0), pc.greater(was, 0)))
    changed = pc.or_(pc.not_equal(count, was), pc.invert(same))
    nothing = pa.nulls(len(found), pa.binary())
    table = pa.table(
        {
            "identity": found.column("identity"),
            "before": pc.if_else(pc.or_(differs, pc.less(count, was)), was_payload, nothing),
            "after": pc.if_else(pc.or_(differs, pc.greater(count, was)), payload, nothing),
            "n": pc.if_else(differs, pa.scalar(1, pa.int64()), pc.abs(pc.subtract(count, was))),
        }
    ).filter(changed)
    duplicates = found.filter(pc.greater(count, 1)).column("identity").to_pylist() if unique else []
    identity, before, after, n = (table.column(c).to_pylist() for c in ("identity", "before", "after", "n"))
    return Changes(
        identity,
        before,
        after,
        n,
        flagged=frozenset(f for f in flags if pc.any(found.column(f)).as_py()),
        duplicate=min(duplicates, default=None),
        received=received,
    )
