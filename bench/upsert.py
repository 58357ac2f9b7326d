"""Upsert catch-up and latency: a materialized view over an ENVELOPE UPSERT source against
two hand-written PySpark jobs doing the same work — a stateful one (transformWithState,
RocksDB) and a foreachBatch one reducing each micro-batch to the latest message per key
(in its read tasks, then in the JVM) and merging it into a versioned Parquet state — and
against sluice's own snapshot SELECT of the topic, in the same run, on the embedded broker
and a local Spark session.

Usage: python bench/upsert.py [--messages N] [--keys K] [--partitions P] [--runs R]

N Avro messages (Confluent wire format) over K TEXT keys, 0.1 % corrupt values, each key in
one partition. The foreachBatch job and sluice each catch up R times, alternating (a first
run in a process pays the JIT compiling its plans' code paths, and whichever runs later
finds more of the JVM warm), and each is timed by its best run. Printed: the catch-up
rates, sluice's ratio to the best hand-written job (target >= 1.0) and to the snapshot read
rate (target >= 0.5), then, after the last runs, the steady-state latency from producing
one message to seeing it in a SELECT (p50 target < 1 s), and the same over an ENVELOPE NONE
source of the topic.
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
from pathlib import Path

import fastavro
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

import sluice
from ingest import avro_reader, seconds_to_read, wait_to_read
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.spark.session import spark

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
    # transformWithState keeps its state in RocksDB only.
    spark().conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    began = time.perf_counter()
    raw = avro_reader(spark().readStream, kafka, topic, SCHEMA).load()
    changes = raw.select(F.col("key").cast("string").alias("key"), "partition", "offset", "value_data", "value_error")
    changes = changes.groupBy("key").transformWithState(
        Latest(),
        "key string, diff int, partition int, offset long, id long, balance double, error string",
        "Append",
        "None",
    )
    write = changes.writeStream.foreachBatch(lambda batch, n: batch.write.parquet(f"{root}/changes/{n}"))
    return seconds_to_read(write, kafka, topic, root, began)


def pyspark_last_per_key(
    kafka: EmbeddedKafka, topic: str, partitions: int, root: Path, samples: int
) -> tuple[float, list[float]]:
    """The hand-written foreachBatch job: each micro-batch reduced to the latest message per
    key, first in each read task before decoding (the reader's `latest_per_key`, with no
    error kept beside it), then in the JVM (`max_by`), merged into a versioned Parquet
    state — the version before it without the batch's keys, plus their latest messages but
    deletes — written under the batch's number, which Spark's checkpoint commits with the
    batch's offsets. Its catch-up seconds, then, as for sluice, each of `samples` messages'
    seconds from being produced to being seen by a query of the state (read-your-writes:
    the query waits for the batch that commits the offsets the topic holds when it starts,
    then reads that batch's version)."""
    session = spark()
    began = time.perf_counter()
    raw = avro_reader(session.readStream, kafka, topic, SCHEMA).option("latest_per_key", "{}").load()
    columns = ["key", "partition", "offset", "id", "balance", "error"]
    messages = raw.select(
        F.col("key").cast("string").alias("key"),
        "partition",
        "offset",
        F.col("value_data.id").alias("id"),
        F.col("value_data.balance").alias("balance"),
        F.col("value_error").alias("error"),
        F.col("value").isNull().alias("deleted"),
    )
    versions = root / "state"

    def merge(batch, n: int) -> None:
        latest = batch.groupBy("key").agg(
            F.max_by(F.struct(*columns, "deleted"), F.struct("partition", "offset")).alias("m")
        )
        latest = latest.select("m.*").persist()
        before = sorted(int(v.name) for v in versions.glob("*") if v.name.isdigit() and int(v.name) < n)
        read = session.read.schema(", ".join(STATE_COLUMNS))
        old = read.parquet(str(versions / str(before[-1]))) if before else read.parquet()
        state = old.join(latest.select("key"), "key", "left_anti").unionByName(
            latest.where(~F.col("deleted")).select(*columns)
        )
        state.write.mode("overwrite").parquet(str(versions / str(n)))
        latest.unpersist()

    latencies: list[float] = []

    def visible(key: str) -> list[tuple]:
        newest = max(int(v.name) for v in versions.glob("*") if v.name.isdigit())
        found = session.read.parquet(str(versions / str(newest))).where(F.col("key") == key)
        return [tuple(row) for row in found.select("balance").collect()]

    def measure(query) -> None:
        def read_your_write(key: str) -> list[tuple]:
            wait_to_read(query, kafka, topic, root)
            return visible(key)

        latencies.extend(latency(read_your_write, kafka, topic, partitions, samples, "pyspark-latency"))

    catch_up = seconds_to_read(messages.writeStream.foreachBatch(merge), kafka, topic, root, began, measure)
    return catch_up, latencies


def latency(visible, kafka: EmbeddedKafka, topic: str, partitions: int, samples: int, prefix: str) -> list[float]:
    """Seconds from producing each of `samples` new keys' messages (`prefix` + a number) to
    `topic` until `visible(key)` returns its balance (it waits for what it reads to hold
    the message)."""
    seconds = []
    for i in range(samples):
        key = f"{prefix}{i}".encode()
        time.sleep(0.5)  # the stream idle, as a produced message finds it
        sent = time.perf_counter()
        produce(kafka.bootstrap, topic, [(key, encode(i))], partition=partition_of(key, partitions))
        found = visible(key.decode())
        seconds.append(time.perf_counter() - sent)
        assert found == [(i * 0.5,)], found
    return seconds


STATE_COLUMNS = ["key string", "partition int", "offset long", "id long", "balance double", "error string"]


def snapshot_seconds(session: sluice.Session, runs: int = 3) -> float:
    """sluice's snapshot read of the topic (`bench/ingest.py`'s SELECT): best of `runs`."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        session.execute("SELECT count(*) FROM IGNORE ERRORS snapshot")
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    # Catch-up of the whole topic is what is measured: no read-your-writes deadline.
    os.environ["SLUICE_CATCH_UP_TIMEOUT"] = "3600"
    schema_sql = json.dumps(SCHEMA).replace("'", "''")
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        load(kafka, "u", args.messages, args.keys, args.partitions)
        spark()
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            f"CREATE SOURCE snapshot FROM KAFKA CONNECTION kafka (TOPIC 'u') FORMAT AVRO USING SCHEMA '{schema_sql}'"
        )
        snapshot_seconds(session, 1)  # Spark's and the Python workers' warm-up, outside every timing
        snap_s = snapshot_seconds(session)
        n = args.messages
        print(f"sluice snapshot SELECT: {n / snap_s:10,.0f} messages/s ({snap_s:.2f} s)", flush=True)
        with tempfile.TemporaryDirectory() as scratch:
            stateful_s = pyspark_upsert(kafka, "u", Path(scratch))
        print(f"pyspark stateful job: {n / stateful_s:10,.0f} messages/s ({stateful_s:.2f} s)", flush=True)
        batch_runs, ours_runs = [], []
        for run in range(args.runs):
            samples = args.samples if run == args.runs - 1 else 0
            with tempfile.TemporaryDirectory() as scratch:
                batch_s, batch_latencies = pyspark_last_per_key(kafka, "u", args.partitions, Path(scratch), samples)
            batch_runs.append(batch_s)
            print(f"pyspark last-per-key job: {n / batch_s:10,.0f} messages/s ({batch_s:.2f} s)", flush=True)
            session.execute(
                f"CREATE SOURCE u{run} FROM KAFKA CONNECTION kafka (TOPIC 'u') KEY FORMAT TEXT "
                f"VALUE FORMAT AVRO USING SCHEMA '{schema_sql}' ENVELOPE UPSERT "
                "(VALUE DECODING ERRORS = INLINE)"
            )
            start = time.perf_counter()
            session.execute(f"CREATE MATERIALIZED VIEW balances{run} AS SELECT key, balance FROM u{run}")
            session.execute(f"SELECT count(*) FROM balances{run}")  # waits until u{run} is caught up
            (counters,) = session.execute(f"SHOW SOURCE STATISTICS FOR u{run}").rows
            ours_runs.append(time.perf_counter() - start)
            print(f"sluice view catch-up: {n / ours_runs[-1]:10,.0f} messages/s ({ours_runs[-1]:.2f} s)", flush=True)
            if run < args.runs - 1:
                session.execute(f"DROP SOURCE u{run} CASCADE")  # its stream stops before the next run
        (rows,) = session.execute(f"SELECT count(*) FROM balances{run}").rows[0]

        def view_latencies(view: str, prefix: str) -> list[float]:
            def visible(key: str) -> list[tuple]:
                return session.execute(f"SELECT balance FROM {view} WHERE key = '{key}'").rows

            return latency(visible, kafka, "u", args.partitions, args.samples, prefix)

        latencies = view_latencies(f"balances{run}", "sluice-latency")
        # The same for an append-only source over the topic (its bad messages in a dead-letter table).
        session.execute(
            f"CREATE SOURCE appended FROM KAFKA CONNECTION kafka (TOPIC 'u') KEY FORMAT TEXT "
            f"VALUE FORMAT AVRO USING SCHEMA '{schema_sql}' INCLUDE KEY ENVELOPE NONE WITH (REDIRECT ERRORS = dead)"
        )
        session.execute("CREATE MATERIALIZED VIEW appended_balances AS SELECT key, balance FROM appended")
        session.execute("SELECT count(*) FROM appended_balances")  # caught up before the samples
        appended = view_latencies("appended_balances", "sluice-appended-latency")
    batch_s, ours_s = min(batch_runs), min(ours_runs)
    print(f"messages: {n:,} over {args.keys:,} keys in {args.partitions} partitions (0.1 % corrupt)")
    print(f"best of {args.runs}: pyspark last-per-key job {n / batch_s:10,.0f} messages/s ({batch_s:.2f} s)")
    print(
        f"best of {args.runs}: sluice view catch-up {n / ours_s:10,.0f} messages/s ({ours_s:.2f} s); "
        f"{rows:,} rows; counters {counters[1:4]}"
    )
    print(f"ratio sluice/best hand-written: {min(stateful_s, batch_s) / ours_s:.2f} (target >= 1.0)")
    print(f"ratio sluice/snapshot read rate: {snap_s / ours_s:.2f} (target >= 0.5)")
    print(
        f"produce → visible in SELECT: p50 {statistics.median(latencies):.2f} s, "
        f"max {max(latencies):.2f} s over {len(latencies)} messages (target p50 < 1 s, p99 < 2 s); "
        f"the hand-written last-per-key job: p50 {statistics.median(batch_latencies):.2f} s, "
        f"max {max(batch_latencies):.2f} s"
    )
    print(
        f"produce → visible in SELECT, ENVELOPE NONE with a dead-letter table: p50 {statistics.median(appended):.2f} s, "
        f"max {max(appended):.2f} s over {len(appended)} messages"
    )


if __name__ == "__main__":
    main()
