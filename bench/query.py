"""Query throughput: a join + aggregate view over two sources in sluice against the same
query written directly in PySpark, in the same run, on the embedded broker and a local
Spark session.

Usage: python bench/query.py [--orders N] [--customers M] [--partitions P]

N orders and M customers (Avro, Confluent wire format; orders over P partitions, the
embedded broker keeping ~5 MiB per partition). The view joins them and aggregates per
region, with a division PostgreSQL could refuse (so sluice checks it row by row). The
baseline reads with the same reader and decoder, drops undecodable rows, joins and
aggregates; sluice does the same plus its error tracking (both sources' errs, the
division's). Each side's time is its best of five runs, taken in turn. Printed: both
rates (input messages per second), and their ratio (target >= 0.9: error tracking costs
< 10 %).
Also printed: sluice's rate when each run renders the sources afresh, as a query does
after their topics moved (rendering a source costs a few hundred JVM calls).
"""

from __future__ import annotations

import argparse
import io
import json
import struct

import fastavro
from pyspark.sql import functions as F

import sluice
from ingest import decoded, load, timed
from sluice.kafka.embedded import EmbeddedKafka
from sluice.storage import source

ORDER = {
    "type": "record",
    "name": "order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer_id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "quantity", "type": "int"},
    ],
}
CUSTOMER = {
    "type": "record",
    "name": "customer",
    "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
}
VIEW = """
CREATE VIEW region_sales AS
SELECT c.region, count(*) AS orders, sum(o.quantity) AS units, sum(o.amount) AS revenue,
       avg(o.amount / o.quantity) AS unit_price
FROM orders AS o JOIN customers AS c ON o.customer_id = c.id
GROUP BY c.region
"""


def encoded(schema: dict, data: list[dict]) -> list[tuple[None, bytes]]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for datum in data:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, datum)
        out.append((None, b"\x00" + struct.pack(">I", 1) + body.getvalue()))
    return out


def sluice_rows(session: sluice.Session) -> list:
    return sorted(session.execute("SELECT * FROM region_sales").rows)


def pyspark_rows(kafka: EmbeddedKafka) -> list:
    orders = decoded(kafka, "orders", ORDER).alias("o")
    customers = decoded(kafka, "customers", CUSTOMER).alias("c")
    result = (
        orders.join(customers, F.col("o.customer_id") == F.col("c.id"))
        .groupBy("c.region")
        .agg(
            F.count(F.lit(1)).alias("orders"),
            F.sum("o.quantity").alias("units"),
            F.sum("o.amount").alias("revenue"),
            F.avg(F.col("o.amount") / F.col("o.quantity")).alias("unit_price"),
        )
    )
    return sorted(tuple(r) for r in result.collect())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=16)
    args = parser.parse_args()
    orders = [
        {"id": i, "customer_id": i % args.customers, "amount": (i % 997) * 0.25, "quantity": 1 + i % 7}
        for i in range(args.orders)
    ]
    customers = [{"id": i, "region": f"r{i % 20}"} for i in range(args.customers)]
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        load(kafka, "orders", args.partitions, encoded(ORDER, orders))
        load(kafka, "customers", max(1, args.partitions // 8), encoded(CUSTOMER, customers))
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        for topic, schema in (("orders", ORDER), ("customers", CUSTOMER)):
            schema_sql = json.dumps(schema).replace("'", "''")
            session.execute(
                f"CREATE SOURCE {topic} FROM KAFKA CONNECTION kafka (TOPIC '{topic}') "
                f"FORMAT AVRO USING SCHEMA '{schema_sql}'"
            )
        session.execute(VIEW)
        sluice_rows(session)  # start Spark and warm both paths outside the timing
        pyspark_rows(kafka)
        (base_s, base_rows), (ours_s, ours_rows), (fresh_s, _) = timed(
            lambda: pyspark_rows(kafka),
            lambda: sluice_rows(session),
            lambda: (source._rendered.cache_clear(), sluice_rows(session)),
        )
    assert [r[:3] for r in ours_rows] == [r[:3] for r in base_rows], (ours_rows[:2], base_rows[:2])
    n = args.orders + args.customers
    print(f"messages: {args.orders:,} orders + {args.customers:,} customers; {len(ours_rows)} result rows")
    print(f"pyspark baseline: {n / base_s:12,.0f} messages/s ({base_s:.2f} s)")
    print(f"sluice view:      {n / ours_s:12,.0f} messages/s ({ours_s:.2f} s)")
    print(f"ratio sluice/baseline: {base_s / ours_s:.2f} (target >= 0.9)")
    print(f"sluice view, sources rendered afresh: {n / fresh_s:12,.0f} messages/s ({fresh_s:.2f} s, ratio {base_s / fresh_s:.2f})")


if __name__ == "__main__":
    main()
