"""Upsert catch-up and latency: a materialized view over an ENVELOPE UPSERT source against
two hand-written PySpark jobs doing the same work — a stateful one (transformWithState,
RocksDB) and a foreachBatch one that reduces each micro-batch to the last message per key
and merges it into a versioned Parquet state — and against sluice's snapshot read of the
same topic, in one run, on the embedded broker and a local Spark session.

Usage: python bench/upsert.py [--messages N] [--keys K] [--partitions P] [--rounds R]

N Avro messages (Confluent wire format) over K TEXT keys, 0.1 % corrupt values, each key in
one partition. The snapshot, the foreachBatch job and sluice's catch-up run in turn, R
rounds, each side keeping its best (the stateful job, the slowest by far, runs once).
Printed: the rates, sluice's catch-up against the best hand-written job (target >= 1.0)
and against the snapshot (target >= 0.5), then the steady-state latency from producing one
message to seeing it in a SELECT (targets p50 < 1 s, p99 < 2 s) and where that time goes.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fastavro
from ingest import avro_reader, seconds_to_read, timed
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

import sluice
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.render.ingest import MAX_OFFSETS_PER_TRIGGER, TRIGGER
from sluice.render.spark import spark

SCHEMA = {
    "type": "record",
    "name": "account",
    "fields": [{"name": "id", "type": "long"}, {"name": "balance", "type": "double"}],
}
PARSED = fastavro.parse_schema(SCHEMA)


def encode(i: int) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, PARSED, {"id": i, "balance": i * 0.5})
    return b"\x00" + struct.pack(">I", 1) + body.getvalue()


def partition_of(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


def load(kafka: EmbeddedKafka, topic: str, count: int, keys: int, partitions: int) -> None:
    rng = random.Random(11)
    by_partition: list[list] = [[] for _ in range(partitions)]
    for i in range(count):
        key = b"k%d" % (i % keys)
        value = rng.randbytes(4) if rng.random() < 0.001 else encode(i)
        by_partition[partition_of(key, partitions)].append((key, value))
    kafka.create_topic(topic, partitions)
    for p, messages in enumerate(by_partition):
        produce(kafka.bootstrap, topic, messages, partition=p)


class Latest(StatefulProcessor):
    """The hand-written job's state: the latest (partition, offset) per key; emits the
    replaced winner (−1) and the new one (+1) with its decoded row."""

    def init(self, handle) -> None:
        self.latest = handle.getValueState("latest", "partition int, offset long")

    def handleInputRows(self, key, rows, timerValues=None):
        newest = max(rows, key=lambda r: (r.partition, r.offset))
        if self.latest.exists():
            partition, offset = self.latest.get()
            yield Row(key=key[0], diff=-1, partition=partition, offset=offset, id=None, balance=None, error=None)
        self.latest.update((newest.partition, newest.offset))
        data = newest.value_data
        yield Row(
            key=key[0],
            diff=1,
            partition=newest.partition,
            offset=newest.offset,
            id=None if data is None else data["id"],
            balance=None if data is None else data["balance"],
            error=newest.value_error,
        )

    def close(self) -> None:
        pass


def pyspark_upsert(kafka: EmbeddedKafka, topic: str, root: Path) -> float:
    state_store = "spark.sql.streaming.stateStore.providerClass"
    # transformWithState needs RocksDB; sluice itself runs no stateful operator.
    spark().conf.set(state_store, "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    try:
        raw = avro_reader(spark().readStream, kafka, topic, SCHEMA).load()
        changes = raw.select(F.col("key").cast("string").alias("key"), "partition", "offset", "value_data", "value_error")
        changes = changes.groupBy("key").transformWithState(
            Latest(),
            "key string, diff int, partition int, offset long, id long, balance double, error string",
            "Append",
            "None",
        )
        write = changes.writeStream.foreachBatch(lambda batch, n: batch.write.parquet(f"{root}/changes/{n}"))
        return seconds_to_read(write, kafka, topic, root)
    finally:
        spark().conf.unset(state_store)


def pyspark_last_per_key(kafka: EmbeddedKafka, topic: str, root: Path) -> float:
    """The hand-written foreachBatch job: micro-batches bounded as sluice's are, each reduced
    to the last message per key by a JVM aggregate (partial aggregation in the read tasks)
    and merged into the state of the micro-batch before it, written as the next version
    of a Parquet state (keys whose last message is a tombstone leave it)."""
    raw = (
        avro_reader(spark().readStream, kafka, topic, SCHEMA)
        .option("max_offsets_per_trigger", str(MAX_OFFSETS_PER_TRIGGER))
        .load()
    )
    messages = raw.select(
        F.col("key").cast("string").alias("key"),
        "partition",
        "offset",
        F.col("value").isNull().alias("deleted"),
        "value_data.*",
        "value_error",
    )

    def merge(batch, n: int) -> None:
        latest = batch.groupBy("key").agg(
            F.max_by(F.struct(*batch.columns), F.struct("partition", "offset")).alias("m")
        ).select("m.*")
        previous = root / "state" / str(n - 1)
        if previous.exists():
            latest = spark().read.parquet(str(previous)).join(latest, "key", "left_anti").unionByName(latest)
        latest.where(~F.col("deleted")).write.mode("overwrite").parquet(str(root / "state" / str(n)))

    return seconds_to_read(messages.writeStream.foreachBatch(merge), kafka, topic, root)


def in_scratch(job: Callable[[EmbeddedKafka, str, Path], float], kafka: EmbeddedKafka, topic: str) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        return job(kafka, topic, Path(scratch))


def sluice_catch_up(session: sluice.Session, source_sql: str, name: str) -> tuple[float, tuple]:
    """Seconds from creating an upsert source and a materialized view over it until the
    view has the whole topic, and the source's counters; the source is dropped after."""
    session.execute(source_sql % name)
    start = time.perf_counter()
    session.execute(f"CREATE MATERIALIZED VIEW {name}_balances AS SELECT key, balance FROM {name}")
    (counters,) = session.execute(f"SHOW SOURCE STATISTICS FOR {name}").rows
    return time.perf_counter() - start, counters


def sluice_snapshot(session: sluice.Session) -> int:
    return session.execute("SELECT count(*) FROM IGNORE ERRORS snapshot").rows[0][0]


def shown(name: str, run: Callable[[], object]) -> Callable[[], object]:
    """`run`, printing how long each call took (a long run is not silent until its end)."""

    def call() -> object:
        start = time.perf_counter()
        result = run()
        print(f"({name}: {time.perf_counter() - start:.2f} s)", flush=True)
        return result

    return call


@dataclass
class Latency:
    """Produce → visible in SELECT, and its parts: the SELECT alone (run again at once,
    nothing left to wait for) and the micro-batch that committed the message."""

    total: list[float] = field(default_factory=list)
    query: list[float] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)


def latency(session: sluice.Session, kafka: EmbeddedKafka, partitions: int, samples: int) -> Latency:
    measured = Latency()
    ingestion = session._streams().running[session.catalog.current.get("live").id]
    for i in range(samples):
        key = b"latency%d" % i
        select = f"SELECT balance FROM live_balances WHERE key = '{key.decode()}'"
        sent = time.perf_counter()
        produce(kafka.bootstrap, "u", [(key, encode(i))], partition=partition_of(key, partitions))
        found = session.execute(select).rows
        measured.total.append(time.perf_counter() - sent)
        assert found == [(i * 0.5,)], found
        again = time.perf_counter()
        session.execute(select)
        measured.query.append(time.perf_counter() - again)
        measured.batch.append(ingestion.query.lastProgress["durationMs"]["triggerExecution"] / 1000)
    return measured


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    # Catch-up of the whole topic is what is measured: no read-your-writes deadline.
    os.environ["SLUICE_CATCH_UP_TIMEOUT"] = "3600"
    schema_sql = json.dumps(SCHEMA).replace("'", "''")
    upsert_sql = (
        "CREATE SOURCE %s FROM KAFKA CONNECTION kafka (TOPIC 'u') KEY FORMAT TEXT "
        f"VALUE FORMAT AVRO USING SCHEMA '{schema_sql}' ENVELOPE UPSERT "
        "(VALUE DECODING ERRORS = INLINE)"
    )
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        load(kafka, "u", args.messages, args.keys, args.partitions)
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            f"CREATE SOURCE snapshot FROM KAFKA CONNECTION kafka (TOPIC 'u') FORMAT AVRO USING SCHEMA '{schema_sql}'"
        )
        sluice_snapshot(session)  # start Spark and warm the read outside the timing
        stateful_s = in_scratch(pyspark_upsert, kafka, "u")
        print(f"(pyspark transformWithState: {stateful_s:.2f} s)", flush=True)
        rounds = iter(range(args.rounds))

        def ours() -> tuple:
            name = f"u{next(rounds)}"
            result = sluice_catch_up(session, upsert_sql, name)
            session.execute(f"DROP SOURCE {name} CASCADE")
            return result

        # sluice's catch-up is timed inside `ours`: creating and dropping the source are not.
        (snapshot_s, _), (last_s, _), (_, (ours_s, counters)) = timed(
            shown("sluice snapshot", lambda: sluice_snapshot(session)),
            shown("pyspark foreachBatch latest", lambda: in_scratch(pyspark_last_per_key, kafka, "u")),
            shown("sluice catch-up, source created and dropped", ours),
            repeats=args.rounds,
        )
        _, live_counters = sluice_catch_up(session, upsert_sql, "live")
        (rows,) = session.execute("SELECT count(*) FROM live_balances").rows[0]
        measured = latency(session, kafka, args.partitions, args.samples)
    n = args.messages
    best_s = min(stateful_s, last_s)
    print(f"messages: {n:,} over {args.keys:,} keys in {args.partitions} partitions (0.1 % corrupt); load {os.getloadavg()[0]:.1f}")
    print(f"sluice snapshot SELECT:       {n / snapshot_s:10,.0f} messages/s ({snapshot_s:.2f} s)")
    print(f"pyspark transformWithState:   {n / stateful_s:10,.0f} messages/s ({stateful_s:.2f} s; one run)")
    print(f"pyspark foreachBatch latest:  {n / last_s:10,.0f} messages/s ({last_s:.2f} s)")
    print(f"sluice view catch-up:         {n / ours_s:10,.0f} messages/s ({ours_s:.2f} s); counters {counters[1:4]}")
    print(f"ratio sluice/best hand-written: {best_s / ours_s:.2f} (target >= 1.0)")
    print(f"ratio sluice/snapshot:          {snapshot_s / ours_s:.2f} (target >= 0.5)")
    print(f"view after catch-up: {rows:,} rows; counters {live_counters[1:4]}")
    print(
        f"produce → visible in SELECT over {len(measured.total)} messages: p50 {statistics.median(measured.total):.2f} s, "
        f"p99 {percentile(measured.total, 99):.2f} s, max {max(measured.total):.2f} s (targets p50 < 1 s, p99 < 2 s)"
    )
    print(
        f"  where it goes (medians): trigger interval {TRIGGER} (waits half on average), "
        f"micro-batch {statistics.median(measured.batch):.2f} s, SELECT alone {statistics.median(measured.query):.2f} s"
    )


if __name__ == "__main__":
    main()
