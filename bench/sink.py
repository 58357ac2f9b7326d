"""Sink throughput and latency: a JSON UPSERT sink over a 1M-row materialized view against
the best hand-written PySpark `foreachBatch` Kafka producer job writing the same messages
from the same input topic, in the same run, on the embedded broker and a local Spark
session.

Usage: python bench/sink.py [--messages N] [--partitions P] [--rounds R] [--samples S]

The input is N Avro orders (Confluent wire format) over P partitions, read by both sides
with sluice's Kafka reader. sluice: `CREATE MATERIALIZED VIEW mv AS SELECT id, customer,
amount FROM orders`, then `CREATE SINK … FROM mv … KEY (id) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT`,
timed from CREATE SINK until its topic holds all N messages (read_committed). The
baseline: a streaming query whose `foreachBatch` encodes key and value with Spark's
`to_json` and produces each Spark partition from the executors with an idempotent
producer (at-least-once, as Spark's own Kafka sink; sluice writes exactly once, in
transactions), timed from its start until its topic holds N messages. Both write the same
bytes: key `{"id":…}`, value `{"id":…,"customer":…,"amount":…}`. Each side runs
R rounds, each on fresh topics; each side's best round counts. The baseline's rounds run
first, before sluice's streams start.

Then the end-to-end latency of the sink: one message produced to the source → its
message visible in the sink's topic to a read_committed consumer, S samples, p50 and p99.
After the first delivery and after the samples it prints what the sink's last step took,
part by part (its status's `seconds`), and how many rows reached the driver. Printed with
the machine's load (`os.getloadavg`), at the start and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import fastavro
from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition
from pyspark.sql import functions as F

import sluice
from ingest import SCHEMA, avro_reader, load, messages
from sluice.kafka.client import watermarks
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.encode import avro_datum, confluent_frame
from sluice.spark.session import spark
from sluice.storage.ingest import TRIGGER

# Seconds a side may take before the run is abandoned as broken.
GIVE_UP_SECONDS = 1800


def committed_count(bootstrap: str, topic: str) -> int:
    """How many messages `topic` holds as a read_committed consumer sees them: its high
    watermarks, less one offset per transaction marker (a transactional producer's topic)
    — counted by reading when the topic is transactional."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-sink-count",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        marks = watermarks(bootstrap, topic, {})
        consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _) in marks.items()])
        count, at_end = 0, set()
        while len(at_end) < len(marks):
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    count += 1
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
        return count
    finally:
        consumer.close()


def wait_for(bootstrap: str, topic: str, count: int, start: float, failure=lambda: None) -> float:
    """Seconds from `start` until `topic`'s high watermarks add up to `count` (a cheap
    look, then a read_committed count to confirm); `failure()` says why the writer died."""
    while True:
        if failure() is not None:
            raise RuntimeError(f"the job writing {topic} failed: {failure()}")
        try:
            high = sum(hi for _, hi in watermarks(bootstrap, topic, {}).values())
        except Exception:  # noqa: BLE001 - the topic is not there yet
            high = 0
        if high >= count and committed_count(bootstrap, topic) >= count:
            return time.perf_counter() - start
        if time.perf_counter() - start > GIVE_UP_SECONDS:
            raise RuntimeError(f"topic {topic} did not reach {count} messages")
        time.sleep(0.1)


def baseline(kafka: EmbeddedKafka, source: str, out: str, count: int, root: Path, partitions: int) -> float:
    """The hand-written job: seconds until `out` holds every message."""
    bootstrap = kafka.bootstrap
    kafka.create_topic(out, partitions)

    def produce_partition(rows) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
             "queue.buffering.max.messages": 1_000_000}
        )
        for row in rows:
            while True:
                try:
                    producer.produce(out, key=row.key, value=row.value)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush()

    def write(batch, _n: int) -> None:
        rows = batch.select(
            F.to_json(F.struct("id")).alias("key"), F.to_json(F.struct("id", "customer", "amount")).alias("value")
        )
        rows.foreachPartition(produce_partition)

    orders = avro_reader(spark().readStream, kafka, source, SCHEMA).load().select("value_data.*")
    start = time.perf_counter()
    query = (
        orders.writeStream.foreachBatch(write)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    try:
        return wait_for(bootstrap, out, count, start, query.exception)
    finally:
        query.stop()


def ours(session: sluice.Session, kafka: EmbeddedKafka, name: str, out: str, count: int, partitions: int) -> float:
    """sluice's sink over the view `mv`: seconds from CREATE SINK until `out` holds every
    message."""
    start = time.perf_counter()
    session.execute(
        f"CREATE SINK {name} FROM mv INTO KAFKA CONNECTION kafka (TOPIC '{out}', TOPIC PARTITION COUNT {partitions}) "
        "KEY (id) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT"
    )
    took = wait_for(kafka.bootstrap, out, count, start)
    print(f"  its last step: {step_parts(session, name)}", flush=True)
    return took


def step_parts(session: sluice.Session, name: str) -> str:
    """What the last step of sink `name` took, part by part, and the changes it received."""
    (job,) = [j for j in session.controller.sinks.values() if j.sink.name == name]
    parts = ", ".join(f"{part} {seconds:.2f} s" for part, seconds in job.status.seconds.items())
    return f"{parts}; {job.status.received:,} changes to the driver"


def same_messages(bootstrap: str, a: str, b: str, sample: int = 1000) -> None:
    """The first `sample` messages of each topic, as sets, are the same bytes."""

    def first(topic: str) -> set:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench-sink-compare", "isolation.level": "read_committed",
             "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        got: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < sample and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    got[message.key()] = message.value()
        consumer.close()
        return got

    left, right = first(a), first(b)
    shared = set(left) & set(right)
    assert shared and all(left[k] == right[k] for k in shared), "the two jobs wrote different messages"


def latencies(kafka: EmbeddedKafka, out: str, samples: int, first_id: int) -> list[float]:
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": "bench-sink-latency", "isolation.level": "read_committed",
         "fetch.wait.max.ms": 10, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(out, p, OFFSET_END) for p in watermarks(kafka.bootstrap, out, {})])
    parsed = fastavro.parse_schema(SCHEMA)
    found: list[float] = []
    try:
        for i in range(first_id, first_id + samples):
            order = {"id": i, "customer": "late", "amount": 1.0, "note": None}
            want = json.dumps({"id": i}, separators=(",", ":")).encode()
            sent = time.perf_counter()
            produce(kafka.bootstrap, "orders", [(None, confluent_frame(1, avro_datum(parsed, order)))])
            seen = False
            while not seen:
                for message in consumer.consume(100, 0.05):
                    if message.error() is None and message.key() == want:
                        seen = True
                if time.perf_counter() - sent > 120:
                    raise RuntimeError(f"message {i} never reached the sink's topic")
            found.append(time.perf_counter() - sent)
    finally:
        consumer.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    n = args.messages
    print(f"load average at start {os.getloadavg()}", flush=True)
    os.environ["SLUICE_CATCH_UP_TIMEOUT"] = "3600"
    schema_sql = json.dumps(SCHEMA).replace("'", "''")
    with EmbeddedKafka() as kafka, sluice.Session() as session, tempfile.TemporaryDirectory() as scratch:
        load(kafka, "orders", args.partitions, messages(n, 0.0, 7))
        spark()
        # The baseline's rounds run before sluice's streams exist: a round of it with them
        # running stalled (its stream got no micro-batch through), so the sides take turns
        # per run, not per round.
        # Output topics have as many partitions as the input: the embedded broker holds
        # about 100,000 messages a partition, and a fuller one stalls its producers.
        base = [
            baseline(kafka, "orders", f"base{r}", n, Path(scratch) / f"base{r}", args.partitions) for r in range(args.rounds)
        ]
        for r, base_s in enumerate(base):
            print(f"round {r}: pyspark foreachBatch producer {n / base_s:10,.0f} messages/s ({base_s:.1f} s)", flush=True)
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(f"CREATE SOURCE orders FROM KAFKA CONNECTION kafka (TOPIC 'orders') FORMAT AVRO USING SCHEMA '{schema_sql}'")
        start = time.perf_counter()
        session.execute("CREATE MATERIALIZED VIEW mv AS SELECT id, customer, amount FROM orders")
        (rows,) = session.execute("SELECT count(*) FROM mv").rows[0]
        view_s = time.perf_counter() - start
        print(f"materialized view: {rows:,} rows, caught up in {view_s:.1f} s", flush=True)
        best_base, best_ours = min(base), float("inf")
        for r in range(args.rounds):
            ours_s = ours(session, kafka, f"s{r}", f"out{r}", n, args.partitions)
            print(f"round {r}: sluice sink                 {n / ours_s:10,.0f} messages/s ({ours_s:.1f} s)", flush=True)
            best_ours = min(best_ours, ours_s)
            same_messages(kafka.bootstrap, f"base{r}", f"out{r}")
            if r + 1 < args.rounds:
                session.execute(f"DROP SINK s{r}")
        lat = latencies(kafka, f"out{args.rounds - 1}", args.samples, n)
        print(f"the sink's last step after the latency samples: {step_parts(session, f's{args.rounds - 1}')}")
    lat.sort()
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    print(f"messages: {n:,} over {args.partitions} partitions; load average {os.getloadavg()}")
    print(f"pyspark foreachBatch producer: {n / best_base:10,.0f} messages/s ({best_base:.1f} s)")
    print(f"sluice sink:                   {n / best_ours:10,.0f} messages/s ({best_ours:.1f} s)")
    print(f"ratio sluice/baseline: {best_base / best_ours:.2f} (target >= 1.0)")
    # The baseline's time includes reading and decoding the input topic; sluice's view had
    # done that before CREATE SINK.
    print(f"ratio with the view's catch-up counted: {best_base / (best_ours + view_s):.2f}")
    print(
        f"produce → visible in the sink's topic: p50 {statistics.median(lat):.2f} s, p99 {p99:.2f} s, "
        f"max {max(lat):.2f} s over {len(lat)} messages"
    )


if __name__ == "__main__":
    main()
