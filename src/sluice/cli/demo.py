"""`sluice demo`: a narrated scenario on the embedded broker and a local Spark session.

Orders arrive on Kafka, a few of them corrupt. The demo shows where every bad message
goes — a dead-letter table (drained into a Kafka Connect DLQ topic by a sink), a failing
query, `IGNORE ERRORS` / `ONLY ERRORS` — and a cross-timeline join being refused, printed as
a user would see them in the REPL.
"""

from __future__ import annotations

import json
import time

from sluice.cli.table import result_text
from sluice.errors import SqlError, format_error
from sluice.kafka.consume import consume
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.session import Session

ORDERS = [
    (b"1001", {"customer": "ada", "amount": 12.5}),
    (b"1002", {"customer": "grace", "amount": 3}),
    (b"1003", b'{"customer": "alan", "amount": '),  # cut off mid-message
    (b"1004", {"customer": "edsger", "amount": 40}),
    (b"1005", b"\xff\xfe not even text"),
    (b"1006", {"customer": "barbara", "amount": 7.25}),
]
CLICKS = [b"/home", b"/cart", b"\xc3\x28", b"/checkout"]
CUSTOMERS = [
    (b"ada", b'{"tier": "gold"}'),
    (b"grace", b'{"tier": "silver"}'),
    (b"edsger", b'{"tier": oops}'),  # a bad value: an inline error on edsger's row
    (b"barbara", b'{"tier": "gold"}'),
]


def say(text: str) -> None:
    print(f"\n-- {text}")


def run(session: Session, sql: str) -> None:
    print(f"sluice=> {sql};")
    started = time.perf_counter()
    try:
        result = session.execute(sql)
    except SqlError as e:
        print(format_error(e, sql))
        return
    print(result_text(result))
    if time.perf_counter() - started > 1:
        print(f"Time: {(time.perf_counter() - started) * 1000:.0f} ms")


def show_topic(bootstrap: str, topic: str) -> None:
    """The topic's messages as `sluice kafka consume` prints them."""
    print(f"$ sluice kafka consume {topic} --from-beginning -e")
    for line in consume(bootstrap, topic, from_beginning=True, exit_at_end=True):
        print(line)


def main() -> int:
    with EmbeddedKafka() as kafka, Session() as session:
        say(f"an embedded Kafka broker is listening on {kafka.bootstrap}")
        kafka.create_topic("orders", 2)
        kafka.create_topic("clicks", 1)
        orders = [(k, v if isinstance(v, bytes) else json.dumps(v).encode()) for k, v in ORDERS]
        produce(kafka.bootstrap, "orders", orders)
        produce(kafka.bootstrap, "clicks", [(None, c) for c in CLICKS])
        say("6 orders were produced, 2 of them corrupt; 4 clicks, 1 of them not UTF-8")

        run(session, f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        say("orders: bad messages go to a dead-letter table, so the source stays queryable")
        run(
            session,
            "CREATE SOURCE orders FROM KAFKA CONNECTION kafka (TOPIC 'orders') "
            "KEY FORMAT TEXT VALUE FORMAT JSON INCLUDE KEY, PARTITION, OFFSET "
            "WITH (REDIRECT ERRORS = orders_dlq, TIMELINE = 'shop')",
        )
        run(session, "SHOW COLUMNS FROM orders")
        say("Spark starts on the first query that needs data")
        run(session, "SELECT key, data FROM orders ORDER BY key")
        run(session, 'SELECT error, partition, "offset" FROM orders_dlq ORDER BY partition, "offset"')

        say("clicks: no dead-letter table, so a query over it fails with the error itself")
        run(session, "CREATE SOURCE clicks FROM KAFKA CONNECTION kafka (TOPIC 'clicks') FORMAT TEXT")
        run(session, "SELECT count(*) FROM clicks")
        say("... unless it asks for the good rows only, or for the errors as rows")
        run(session, "SELECT count(*) FROM IGNORE ERRORS clicks")
        run(session, "SELECT message FROM ONLY ERRORS clicks")

        say("customers: an upsert source; a bad value becomes an inline error on its key's row")
        kafka.create_topic("customers", 1)
        produce(kafka.bootstrap, "customers", CUSTOMERS)
        run(
            session,
            "CREATE SOURCE customers FROM KAFKA CONNECTION kafka (TOPIC 'customers') "
            "KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE) "
            "WITH (TIMELINE = 'shop')",
        )
        run(session, "SELECT key, error, data FROM customers ORDER BY key")
        say("a materialized view joins orders with customers; it runs continuously from now on")
        run(
            session,
            "CREATE MATERIALIZED VIEW order_tiers AS "
            "SELECT o.key AS order_id, c.key AS customer, c.data->>'tier' AS tier, "
            "c.error IS NOT NULL AS customer_broken "
            "FROM orders AS o JOIN customers AS c ON c.key = o.data->>'customer'",
        )
        run(session, "SELECT * FROM order_tiers ORDER BY order_id")
        say("a corrected value for edsger arrives: the inline error is retracted")
        produce(kafka.bootstrap, "customers", [(b"edsger", b'{"tier": "bronze"}')])
        run(session, "SELECT * FROM order_tiers ORDER BY order_id")

        say("orders are on timeline 'shop', clicks on wall-clock time: one dataflow cannot mix them")
        run(session, "SELECT * FROM orders JOIN IGNORE ERRORS clicks ON true")
        run(session, "EXPLAIN TIMELINE FOR SELECT key FROM orders")
        say(
            "the dead-letter table drains into a topic in Kafka Connect's DLQ format: each bad "
            "message as it was read, with __connect.errors.* headers saying where it came from and why"
        )
        run(session, "CREATE SINK orders_dead FROM orders_dlq INTO KAFKA CONNECTION kafka (TOPIC 'orders-dead')")
        session.drain_sinks(120)
        show_topic(kafka.bootstrap, "orders-dead")
        say("every source's counters, from its continuous ingestion (clicks, only queried, has none)")
        run(session, "SHOW SOURCE STATISTICS")
        say("done: every message is accounted for — in the source, its dead-letter table, or an error")
    return 0
