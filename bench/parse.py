"""Parse + canonical-SQL throughput on a corpus of mixed statements, one core.

Usage: python bench/parse.py [--seconds N]

The corpus is ≥ 200 statements: every DDL shape of the dialect (connections, sources in
each format × envelope × option combination, sinks, tables, drops, shows, explains) plus
a share of queries, which go through sqlglot. It reports DDL and query rates separately;
the target is ≥ 5,000 DDL statements/s.
"""

from __future__ import annotations

import argparse
import itertools
import time

from sluice import parse

FORMATS = [
    "FORMAT TEXT",
    "FORMAT BYTES",
    "FORMAT JSON",
    "FORMAT CSV WITH 3 COLUMNS DELIMITED BY ';'",
    "FORMAT AVRO USING SCHEMA '{\"type\": \"record\", \"name\": \"r\", \"fields\": []}'",
    "KEY FORMAT TEXT VALUE FORMAT JSON",
    "KEY FORMAT JSON VALUE FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
]
ENVELOPES = [
    "",
    "ENVELOPE NONE",
    "INCLUDE KEY AS k, PARTITION, OFFSET ENVELOPE UPSERT",
    "INCLUDE TIMESTAMP ENVELOPE UPSERT (VALUE DECODING ERRORS = (INLINE AS err, PROPAGATE))",
    "ENVELOPE DEBEZIUM",
]
WITHS = [
    "",
    "WITH (REDIRECT ERRORS = dlq)",
    "WITH (TIMELINE = 'orders', ERROR TOLERANCE = 10)",
]
OTHER_DDL = [
    "CREATE CONNECTION k{i} TO KAFKA (BROKER 'localhost:9092', SECURITY PROTOCOL = SASL_SSL, SASL MECHANISMS = 'PLAIN', SASL USERNAME = 'u', SASL PASSWORD = SECRET pw)",
    "CREATE CONNECTION csr{i} TO CONFLUENT SCHEMA REGISTRY (URL 'http://localhost:8081')",
    "CREATE SINK s{i} FROM v INTO KAFKA CONNECTION k (TOPIC 'out') KEY (id) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT",
    "CREATE TABLE t{i} (id bigint NOT NULL, name text, price numeric(10, 2) DEFAULT 0, PRIMARY KEY (id))",
    "DROP SOURCE IF EXISTS s{i}, other CASCADE",
    "SHOW SOURCES",
    "SHOW COLUMNS FROM s{i}",
    "SHOW CREATE MATERIALIZED VIEW v{i}",
]
QUERIES = [
    "SELECT key, count(*) FROM s{i} WHERE error IS NULL GROUP BY key",
    "CREATE MATERIALIZED VIEW mv{i} AS SELECT a.x, b.y FROM IGNORE ERRORS a JOIN b ON a.id = b.id",
    "INSERT INTO t{i} VALUES (1, 'a', 2.5)",
    "SUBSCRIBE (SELECT * FROM ONLY ERRORS s{i})",
]


def corpus() -> tuple[list[str], list[str]]:
    sources = [
        f"CREATE SOURCE src{i} FROM KAFKA CONNECTION kafka (TOPIC 't{i}') {f} {e} {w}"
        for i, (f, e, w) in enumerate(itertools.product(FORMATS, ENVELOPES, WITHS))
    ]
    others = [t.format(i=i) for i in range(12) for t in OTHER_DDL]
    queries = [t.format(i=i) for i in range(12) for t in QUERIES]
    return sources + others, queries


def rate(statements: list[str], seconds: float) -> float:
    script = ";\n".join(statements)
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for statement in parse(script):
            statement.to_sql()
        done += len(statements)
    return done / elapsed


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--seconds", type=float, default=3.0)
    seconds = args.parse_args().seconds
    ddl, queries = corpus()
    parse(";".join(ddl + queries))  # build the parser and warm caches outside the timing
    ddl_rate = rate(ddl, seconds)
    query_rate = rate(queries, seconds)
    mixed_rate = rate(ddl + queries, seconds)
    print(f"corpus: {len(ddl)} DDL + {len(queries)} query statements")
    print(f"DDL:     {ddl_rate:8.0f} statements/s (target >= 5000)")
    print(f"queries: {query_rate:8.0f} statements/s (sqlglot)")
    print(f"mixed:   {mixed_rate:8.0f} statements/s")


if __name__ == "__main__":
    main()
