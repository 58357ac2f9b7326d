"""Growth curves: how sluice's costs grow with the data, on the embedded broker and a local
Spark session.

Usage: python bench/scale.py [--sizes 0.1,1,4] [--commits 10,100,1000,10000]

Catch-up: a continuously ingested ENVELOPE NONE source (Avro, 0.1 % corrupt, a dead-letter
table) over a topic of 0.1 M, 1 M and 4 M messages (`--sizes`, in millions), timed until
it has committed the whole topic (a read of the source waits for that; the stream's
start-up is included). The embedded broker keeps ~100 k messages of this size per
partition, so a topic has 16 partitions, or one per 80 k messages beyond that (4 M: 50).

Read cost: `SELECT count(*)` of a source whose store holds 10, 100, 1,000 and 10,000
committed micro-batches of one message each (`--commits`), without compaction and with
it. Waiting for 10,000 real micro-batches would take hours, so the commits are written
as the ingestion writes them (a Parquet file of the source's own rows under
`__out=oks`, then `Store.commit`) without fsync, over a topic holding exactly the
messages they cover; the source's stream then starts, finds nothing new and the SELECT
reads the store. The compacted store is what the background compaction keeps: a base
and, after it, half of `SLUICE_COMPACT_AFTER` commits. Each SELECT is the best of five.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import SCHEMA, load, messages, sluice_stream, timed  # noqa: E402

import sluice  # noqa: E402
from sluice.errors import SourceFailed  # noqa: E402
from sluice.kafka.embedded import EmbeddedKafka, produce  # noqa: E402
from sluice.spark.session import spark  # noqa: E402
from sluice.storage.compaction import compact, compact_after  # noqa: E402
from sluice.storage.location import disk, local  # noqa: E402
from sluice.storage.store import Store  # noqa: E402

PER_PARTITION = 80_000


def partitions_for(count: int) -> int:
    return max(16, -(-count // PER_PARTITION))


def schema_sql() -> str:
    return json.dumps(SCHEMA).replace("'", "''")


def catch_up(kafka: EmbeddedKafka, count: int) -> tuple[int, float, tuple]:
    """Seconds a new source takes to ingest a topic of `count` messages, and its counters."""
    topic = f"catchup_{count}"
    parts = partitions_for(count)
    load(kafka, topic, parts, messages(count, 0.001, seed=11))
    with tempfile.TemporaryDirectory() as data_dir, sluice.Session(Path(data_dir)) as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            f"CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC '{topic}') "
            f"FORMAT AVRO USING SCHEMA '{schema_sql()}' WITH (REDIRECT ERRORS = s_dlq)"
        )
        seconds, counters = sluice_stream(session, "s")
    return parts, seconds, counters


@contextmanager
def without_fsync():
    """Scratch commits need not survive a crash: writing 10,000 of them durably takes minutes."""
    fsync = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = fsync


class CommitWriter:
    """Commits of one message each to a source's store, as its ingestion writes them,
    made from the rows of a real micro-batch (`template`: one of its oks files)."""

    def __init__(self, store: Store, template: Path) -> None:
        self.store = store
        self.template = pq.read_table(template).slice(0, 1)
        store.head = store.last_commit()
        self.offset = 0  # the next message's

    def add(self, count: int) -> None:
        with without_fsync():
            for _ in range(count):
                offset = self.offset
                self.offset += 1
                row = self.template.set_column(
                    self.template.schema.get_field_index("__o"), "__o", pa.array([offset], pa.int64())
                )
                staging = Path(tempfile.mkdtemp(prefix="batch-bench-", dir=disk(self.store.root)))
                (staging / "out" / "__out=oks").mkdir(parents=True)
                # INT96, as Spark writes timestamps: the store's readers expect Spark's types.
                pq.write_table(
                    row, staging / "out" / "__out=oks" / "part-00000.parquet", use_deprecated_int96_timestamps=True
                )
                self.store.commit(
                    local(staging / "out"),
                    batch=offset,
                    ingested_ms=int(time.time() * 1000),
                    offsets={0: (offset, offset + 1)},
                    redirected=False,
                    upsert=False,
                )
                staging.rmdir()


def read_costs(kafka: EmbeddedKafka, targets: list[int]) -> Iterator[tuple[int, float, float]]:
    """(commits, SELECT seconds without compaction, with it) at each number of commits."""
    spare = max(1, compact_after() // 2)
    data = messages(max(targets), 0.0, seed=5)
    kafka.create_topic("reads", 1)
    kafka.create_topic("template", 1)
    produce(kafka.bootstrap, "template", data[:1], partition=0)
    produced = 0
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch)
        with sluice.Session(data_dir) as session:
            session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
            for name, topic in (("template", "template"), ("plain", "reads"), ("compacted", "reads")):
                session.execute(
                    f"CREATE SOURCE {name} FROM KAFKA CONNECTION kafka (TOPIC '{topic}') "
                    f"FORMAT AVRO USING SCHEMA '{schema_sql()}'"
                    # Ingested continuously, as a source with a dead-letter table is: its
                    # micro-batch gives the rows' schema. The others are, having a store.
                    + (" WITH (REDIRECT ERRORS = template_dlq)" if name == "template" else "")
                )
            session.execute("SELECT count(*) FROM template")
            ids = {name: session.catalog.current.get(name).id for name in ("template", "plain", "compacted")}
        streams = data_dir / "streams"
        template = next((streams / ids["template"]).glob("batches/0/__out=oks/*.parquet"))
        plain = CommitWriter(Store(local(streams / ids["plain"])), template)
        disk(plain.store.root).mkdir(parents=True, exist_ok=True)
        (disk(plain.store.root) / "schema.json").write_bytes((streams / ids["template"] / "schema.json").read_bytes())
        for target in targets:
            produce(kafka.bootstrap, "reads", data[produced:target], partition=0)
            produced = target
            # The compacted store: the plain one's commits but the last few, compacted as
            # the background compaction would have, then those few after its base.
            plain.add(max(0, target - spare) - plain.offset)
            shutil.rmtree(streams / ids["compacted"], ignore_errors=True)
            shutil.copytree(disk(plain.store.root), streams / ids["compacted"], ignore=shutil.ignore_patterns("checkpoint"))
            compacted = CommitWriter(Store(local(streams / ids["compacted"])), template)
            compacted.offset = plain.offset
            compact(spark(), compacted.store, upsert=False)
            for writer in (plain, compacted):
                writer.add(target - writer.offset)
            with sluice.Session(data_dir) as session:
                queries = [
                    lambda n=name: started(lambda: session.execute(f"SELECT count(*) FROM {n}").rows[0][0])
                    for name in ("plain", "compacted")
                ]
                for query in queries:
                    assert query() == target  # the stream started and found nothing new
                if target == targets[0]:
                    timed(*queries)  # the JVM's code for these reads warmed up before the first figures
                (plain_s, _), (compacted_s, _) = timed(*queries)
            yield target, plain_s, compacted_s


def started(query, attempts: int = 5):
    """`query`'s result once its sources' streams have started: on a loaded machine a
    stream's Python worker may miss Spark's connection timeout, and its supervisor
    restarts it."""
    for attempt in range(attempts):
        try:
            return query()
        except SourceFailed:
            if attempt == attempts - 1:
                raise
            time.sleep(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.1,1,4", help="catch-up topic sizes, in millions")
    parser.add_argument("--commits", default="10,100,1000,10000")
    args = parser.parse_args()
    sizes = [int(float(s) * 1_000_000) for s in args.sizes.split(",") if s]
    commits = [int(c) for c in args.commits.split(",") if c]
    spark()  # started outside the timings
    with EmbeddedKafka() as kafka:
        print("catch-up of an ENVELOPE NONE Avro source (0.1 % corrupt, dead-letter table):")
        print(f"  {'messages':>10} {'partitions':>10} {'seconds':>8} {'messages/s':>12} {'load':>5}", flush=True)
        for n in sizes:
            parts, seconds, counters = catch_up(kafka, n)
            assert counters[1] == n, (counters, n)
            print(f"  {n:>10,} {parts:>10} {seconds:>8.2f} {n / seconds:>12,.0f} {machine_load():>5}", flush=True)
        print(f"SELECT count(*) against committed micro-batches (compacted: after {compact_after()} commits):")
        print(f"  {'commits':>8} {'plain s':>8} {'compacted s':>12} {'plain/first':>12} {'compacted/first':>16} {'load':>5}")
        first = None
        for n, plain_s, compacted_s in read_costs(kafka, commits) if commits else ():
            first = first or (plain_s, compacted_s)
            print(
                f"  {n:>8,} {plain_s:>8.3f} {compacted_s:>12.3f} {plain_s / first[0]:>12.2f} "
                f"{compacted_s / first[1]:>16.2f} {machine_load():>5}",
                flush=True,
            )


def machine_load() -> str:
    """The machine's load (1-minute average) over its cores: the figures' context."""
    return f"{os.getloadavg()[0]:.0f}/{os.cpu_count()}"


if __name__ == "__main__":
    main()
