"""The store's own bookkeeping, on real files without Spark running: a check keeps exactly
the commits before the first damaged one, and micro-batches from any checkpoint — run
again, older, lost, or ahead of a store that lost its last commit — commit every offset
exactly once. (tests/test_faults_store.py runs the same faults through Spark and Kafka.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sluice.errors import StoreDamaged
from sluice.storage.location import disk, local
from sluice.storage.store import Store

FILE_DAMAGES = ["file emptied", "file deleted", "byte flipped", "batch folder deleted"]
RECORD_DAMAGES = ["record truncated", "record deleted"]
HARMLESS = ["stray file", "stray batch folder"]


def written(root: Path, rows: int) -> Path:
    """A batch as Spark writes it: Parquet files under `__out=<kind>` folders."""
    out = root / "out"
    for kind in ("oks", "dlq"):
        (out / f"__out={kind}").mkdir(parents=True)
        table = pa.table({"__p": [0] * rows, "__o": list(range(rows))})
        pq.write_table(table, out / f"__out={kind}" / "part-00000.parquet")
    return out


def committed(store: Store, batch: int, offsets: dict[int, tuple[int, int]], rows: int = 0) -> None:
    staging = disk(store.root) / f"batch-{batch}-staging"
    store.commit(
        local(written(staging, rows)), batch=batch, ingested_ms=batch, offsets=offsets, redirected=True, upsert=False
    )
    shutil.rmtree(staging)


def damage(store: Store, kind: str, number: int) -> None:
    record = disk(store.commits) / f"{number}.json"
    listed = disk(store.root) / json.loads(record.read_text())["files"][0]["path"]
    if kind == "file emptied":
        listed.write_bytes(b"")
    elif kind == "file deleted":
        listed.unlink()
    elif kind == "byte flipped":
        data = bytearray(listed.read_bytes())
        data[len(data) // 2] ^= 0x01
        listed.write_bytes(bytes(data))
    elif kind == "batch folder deleted":
        shutil.rmtree(disk(store.batches) / str(number))
    elif kind == "record truncated":
        record.write_text(record.read_text()[:20])
    elif kind == "record deleted":
        record.unlink()
    elif kind == "stray file":
        shutil.copy(listed, listed.with_name("part-99999.parquet"))
    elif kind == "stray batch folder":
        shutil.copytree(listed.parent.parent, disk(store.batches) / f"9{number}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(1, 5),
    damages=st.lists(
        st.tuples(st.sampled_from(FILE_DAMAGES + RECORD_DAMAGES + HARMLESS), st.integers(0, 4)), max_size=3
    ),
)
def test_a_check_keeps_exactly_the_commits_before_the_first_damage(tmp_path_factory, count, damages) -> None:
    store = Store(local(tmp_path_factory.mktemp("store")))
    for number in range(count):
        committed(store, number, {0: (10 * number, 10 * number + 10)}, rows=number + 1)
    done: dict[int, str] = {}
    for kind, number in damages:
        if number < count and number not in done:  # one damage a commit: the first one names it
            damage(store, kind, number)
            done[number] = kind
    # What a check must find: records are numbered up to the highest left; below it, the
    # first commit that lost its record or a file is damaged.
    present = [n for n in range(count) if done.get(n) != "record deleted"]
    last = max(present, default=-1)
    broken = [n for n in range(last + 1) if n in done and done[n] not in HARMLESS]
    inspection = store.inspect()
    sound = broken[0] if broken else last + 1
    assert [r["commit"] for r in inspection.records] == list(range(sound))
    if broken:
        assert inspection.damage.what.startswith(f"commit {broken[0]}: ")
    else:
        assert inspection.damage is None


class Spark:
    """Spark's checkpoint as far as the store reads it: an offset log (each micro-batch's
    end offsets, written before it runs) and a commit log (after it ran). A micro-batch
    planned but not committed runs again first, to the same end."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def logged(self, kind: str) -> list[int]:
        folder = disk(self.store.checkpoint) / kind
        return sorted(int(p.name) for p in folder.iterdir()) if folder.exists() else []

    def log(self, kind: str, batch: int, ends: dict[int, int] | None = None) -> None:
        folder = disk(self.store.checkpoint) / kind
        folder.mkdir(parents=True, exist_ok=True)
        text = "v1\n{}\n" + json.dumps({str(p): o for p, o in (ends or {}).items()})
        (folder / str(batch)).write_text(text)

    def run(self, high: dict[int, int]) -> None:
        """The next micro-batch, its rows committed through `foreachBatch` as ingestion does."""
        planned, done = self.logged("offsets"), self.logged("commits")
        if planned and planned[-1] not in done:
            batch = planned[-1]
        else:
            batch = planned[-1] + 1 if planned else 0
            self.log("offsets", batch, high)
        adds = self.store.batch_offsets(batch)
        if adds is not None:
            committed(self.store, batch, adds)
            assert self.store.inspect().damage is None  # a commit starts where the last one ended
        self.log("commits", batch)

    def forget_after(self, batch: int) -> None:
        """An older copy of the checkpoint: as it was after `batch`."""
        for kind in ("offsets", "commits"):
            for path in (disk(self.store.checkpoint) / kind).glob("*"):
                if int(path.name) > batch:
                    path.unlink()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(upsert=st.booleans(), steps=st.lists(st.sampled_from(
    ["batch", "batch", "batch", "restart", "older checkpoint", "checkpoint lost", "last commit lost"]
), min_size=1, max_size=12), data=st.data())
def test_micro_batches_from_any_checkpoint_commit_every_offset_once(
    tmp_path_factory, upsert, steps, data
) -> None:
    root = tmp_path_factory.mktemp("store")
    origin = {0: 0, 1: 5}
    high = dict(origin)

    def reopened() -> tuple[Store, Spark]:
        store = Store(local(root))
        store.recover("s", origin, upsert, lambda: {0: 0, 1: 0})
        return store, Spark(store)

    store, spark = reopened()
    for step in steps:
        if step == "batch":
            for p in high:  # partition 0 always moves on, so that a new micro-batch runs
                high[p] += data.draw(st.integers(1 - p, 3))
            try:
                spark.run(high)
            except StoreDamaged:
                store, spark = reopened()  # the stream failed loudly; it starts again
        elif step == "restart":
            store, spark = reopened()
        elif step == "older checkpoint" and spark.logged("offsets"):
            spark.forget_after(data.draw(st.sampled_from(spark.logged("offsets"))))
            store, spark = reopened()
        elif step == "checkpoint lost":
            shutil.rmtree(disk(store.checkpoint), ignore_errors=True)
            store, spark = reopened()
        elif step == "last commit lost" and store.committed():
            (disk(store.commits) / f"{store.committed()[-1]}.json").unlink()
    store, spark = reopened()  # whatever the steps left, a restart and two micro-batches catch up
    spark.run(high)
    spark.run(high)
    inspection = store.inspect()
    assert inspection.damage is None
    for p, start in origin.items():
        ranges = sorted(r["offsets"][str(p)] for r in inspection.records)
        covered = [o for lo, hi in ranges for o in range(lo, hi)]
        assert covered == list(range(start, high[p]))


def test_a_micro_batch_from_an_older_checkpoint_commits_only_what_is_new(tmp_path) -> None:
    origin = {0: 0, 1: 5}
    store = Store(local(tmp_path))
    store.recover("s", origin, False, lambda: origin)
    spark = Spark(store)
    for ends in [{0: 2, 1: 7}, {0: 4, 1: 9}]:
        spark.run(ends)
    spark.forget_after(0)
    store = Store(local(tmp_path))
    assert store.recover("s", origin, False, lambda: origin) == {0: 4, 1: 9}
    spark.log("offsets", 1, {0: 6, 1: 9})
    # Spark reads again from where its older checkpoint ended: rows below 4 and 9 are
    # committed (the reader does not read them again), the micro-batch adds the rest.
    assert store.batch_offsets(1) == {0: (4, 6), 1: (9, 9)}
    # An upsert source's state is what its commits leave: it recovers the same way.
    store.save_schema(StructType([StructField("__out", StringType()), StructField("__k", BinaryType())]))
    assert Store(local(tmp_path)).recover("s", origin, True, lambda: origin) == {0: 4, 1: 9}
    # One an older sluice wrote kept its state in the checkpoint, without `state` files: rebuilt.
    store.save_schema(StructType([StructField("__out", StringType())]))
    upsert = Store(local(tmp_path))
    assert upsert.recover("s", origin, True, lambda: origin) == origin
    assert upsert.committed() == [] and not upsert.checkpoint.exists()


def test_temporary_files_spark_left_in_its_checkpoint_are_removed_when_a_stream_starts(tmp_path) -> None:
    """A log entry Spark failed to write (its disk full) leaves `.<n>.<uuid>.tmp` and its
    `.crc` in the checkpoint; left there, Spark refuses to start the stream at batch 0."""
    store = Store(local(tmp_path))
    committed(store, 0, {0: (0, 10)}, rows=1)
    checkpoint = tmp_path / "checkpoint"
    for name in ["metadata", "offsets/.0.0f3c9e.tmp", "offsets/..0.0f3c9e.tmp.crc", "commits/.0.77aa01.tmp"]:
        (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
        (checkpoint / name).write_bytes(b"")
    assert store.recover("s", {0: 0}, False, lambda: {0: 0}) == {0: 10}
    assert sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*")) == ["commits", "metadata", "offsets"]
    assert [r["commit"] for r in store.inspect().records] == [0]
