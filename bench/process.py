"""Whole-process cost: `sluice run` of a snapshot `SELECT count(*)` over N Avro messages
against a hand-written PySpark script doing the same fused read, each started as its own
process, in turn, on one embedded broker this process serves.

Usage: python bench/process.py [--messages N] [--partitions P] [--runs R] [--profile]

Both processes pay Python's start, their imports and a Spark session; sluice also parses
and plans, keeps its catalog in a temporary data directory and checks the topic. The
script is what a strong engineer writes: a plain `SparkSession`, sluice's Kafka reader
registered, the same Avro decode, bad messages dropped, `count()`. Printed per side:
the median, minimum and maximum wall seconds of R runs (taken A B A B …), the ratio of
medians (target >= 1.0) and the machine's load at the start and at the end.

With `--profile`, one more `sluice run` under cProfile prints where the process spends
its time outside Spark's JVM (the top functions by cumulative time).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ingest import SCHEMA, load, messages
from sluice.kafka.embedded import EmbeddedKafka

SLUICE = Path(sys.executable).with_name("sluice")

BASELINE = """\
import json, os, sys
from pyspark.sql import SparkSession
from sluice.catalog.formats import AvroInline
from sluice.kafka.client import watermarks
from sluice.spark.kafka_source import KafkaDataSource, NAME, decode_spec

bootstrap, topic, schema = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import the reader
spark = SparkSession.builder.master("local[2]").getOrCreate()
spark.dataSource.register(KafkaDataSource)
ranges = [[p, lo, hi] for p, (lo, hi) in watermarks(bootstrap, topic, {}).items()]
decode = {"value": decode_spec(AvroInline((), True, schema))}
frame = (
    spark.read.format(NAME).option("bootstrap", bootstrap).option("topic", topic)
    .option("decode", json.dumps(decode)).option("ranges", json.dumps(ranges)).load()
)
print(frame.where("value_error IS NULL").select("value_data.*").count())
"""


def timed(command: list[str]) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.stdout


def counted(output: str) -> int:
    """The count a side printed: its last line that is a number (sluice's table has one)."""
    return next(int(line.strip()) for line in reversed(output.splitlines()) if line.strip().isdigit())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    schema = json.dumps(SCHEMA)
    print(f"load average at start {os.getloadavg()}")
    with EmbeddedKafka() as kafka, tempfile.TemporaryDirectory() as scratch:
        load(kafka, "orders", args.partitions, messages(args.messages, 0.001, seed=7))
        script = Path(scratch, "count.sql")
        script.write_text(textwrap.dedent(f"""\
            CREATE SOURCE orders FROM KAFKA CONNECTION kafka (TOPIC 'orders')
              FORMAT AVRO USING SCHEMA '{schema.replace("'", "''")}';
            SELECT count(*) FROM IGNORE ERRORS orders;
        """))
        baseline = Path(scratch, "baseline.py")
        baseline.write_text(BASELINE)
        sides = {
            "sluice run": [str(SLUICE), "run", "--broker", kafka.bootstrap, str(script)],
            "hand-written script": [sys.executable, str(baseline), kafka.bootstrap, "orders", schema],
        }
        times: dict[str, list[float]] = {name: [] for name in sides}
        counts = set()
        for _ in range(args.runs):
            for name, command in sides.items():
                elapsed, output = timed(command)
                times[name].append(elapsed)
                counts.add(counted(output))
        assert len(counts) == 1, counts
        if args.profile:
            profile = Path(scratch, "run.prof")
            timed([sys.executable, "-m", "cProfile", "-o", str(profile), *sides["sluice run"]])
            pstats.Stats(str(profile)).sort_stats("cumulative").print_stats(30)
    print(f"messages: {args.messages:,} over {args.partitions} partitions; counted {counts.pop():,} good rows")
    for name, seconds in times.items():
        print(
            f"{name + ':':22} median {statistics.median(seconds):6.2f} s "
            f"(min {min(seconds):.2f}, max {max(seconds):.2f}; {args.runs} runs)"
        )
    ratio = statistics.median(times["hand-written script"]) / statistics.median(times["sluice run"])
    print(f"ratio script/sluice (medians): {ratio:.2f} (target >= 1.0)")
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
