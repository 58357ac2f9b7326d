"""Broker outages under continuous ingestion, and the broker connections an idle source
keeps (issue 14, parts 2 and 7), on the embedded broker and a local Spark session.

Usage: python bench/fault_outage.py

Two sources read one topic, each under a materialized view counting its rows and its
distinct rows: `patient` with the default retry bound (RETRY TIMEOUT 60 s), `brief` with
RETRY TIMEOUT '2s'. The broker goes down for each outage in `OUTAGES`, then more messages
are produced; every view must then hold every message exactly once. `patient` must ride
each outage out without failing; `brief` must show itself failed (SHOW SOURCE STATISTICS)
and recover by itself. Printed: the longest outage that lost and duplicated nothing, the
messages lost or duplicated, the outages past the bound shown failed and recovered, the
seconds both views took to catch up once the broker was back, and the new TCP connections
per idle source per second (the kernel's table over a window).
"""

from __future__ import annotations

import time

import sluice
from sluice.kafka.embedded import EmbeddedKafka, produce

OUTAGES = (5, 20)  # seconds
BATCH = 500  # messages produced before the first outage and after each
IDLE_WINDOW = 5.0  # seconds over which connections are counted
VIEWS = {"patient": "pv", "brief": "bv"}


def _counts(session: sluice.Session) -> dict[str, tuple[int, int] | None]:
    """Each view's (rows, distinct rows), None while its source is failed."""
    counts = {}
    for source, view in VIEWS.items():
        try:
            (counts[source],) = session.execute(f"SELECT n, d FROM {view}").rows
        except sluice.SqlError:
            counts[source] = None
    return counts


def _status(session: sluice.Session, source: str) -> str:
    result = session.execute(f"SHOW SOURCE STATISTICS FOR {source}")
    return dict(zip(result.columns, result.rows[0]))["status"]


def _settle(session: sluice.Session, sent: int, seconds: float = 120.0) -> dict:
    """The views' counts once both hold `sent` rows (or `seconds` have passed)."""
    deadline = time.monotonic() + seconds
    while True:
        counts = _counts(session)
        if all(c is not None and c[0] >= sent for c in counts.values()) or time.monotonic() > deadline:
            return counts
        time.sleep(0.5)


def measure() -> list[tuple[str, object]]:
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        kafka.create_topic("t", 1)
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute("CREATE SOURCE patient FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT")
        session.execute(
            "CREATE SOURCE brief FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT "
            "WITH (RETRY TIMEOUT = '2s', RETRY DELAY MAX = '1s')"
        )
        for source, view in VIEWS.items():
            session.execute(
                f"CREATE MATERIALIZED VIEW {view} AS SELECT count(*) AS n, count(DISTINCT text) AS d FROM {source}"
            )
        sent = 0

        def send() -> None:
            nonlocal sent
            produce(kafka.bootstrap, "t", [(None, b"m%d" % i) for i in range(sent, sent + BATCH)])
            sent += BATCH

        send()
        _settle(session, sent)

        before = kafka.client_ports()
        time.sleep(IDLE_WINDOW)
        opened = len(kafka.client_ports() - before)

        survived, wrong, shown_failed, catch_up = 0, 0, 0, 0.0
        for seconds in OUTAGES:
            kafka.set_broker_down(1)
            down_until = time.monotonic() + seconds
            # `brief` shows itself failed once the outage outlasts its 2 s bound.
            failed = False
            while not failed and time.monotonic() < down_until:
                failed = _status(session, "brief") == "failed"
                time.sleep(0.5)
            time.sleep(max(0.0, down_until - time.monotonic()))
            kafka.set_broker_up(1)
            back = time.monotonic()
            send()
            counts = _settle(session, sent)
            catch_up = max(catch_up, time.monotonic() - back)
            wrong += sum(abs(sent - c[0]) + (c[0] - c[1]) if c else sent for c in counts.values())
            if counts["patient"] == (sent, sent) and not wrong:
                survived = max(survived, seconds)
            shown_failed += failed and counts["brief"] == (sent, sent) and _status(session, "brief") == "running"
    return [
        ("outage seconds survived", survived),
        ("outages tried", len(OUTAGES)),
        ("messages lost or duplicated across outages", wrong),
        ("outages past a source's retry bound shown failed, then recovered", shown_failed),
        ("seconds to catch up once the broker was back (worst)", round(catch_up, 1)),
        ("broker connections per idle source per second", round(opened / IDLE_WINDOW / len(VIEWS), 2)),
    ]


if __name__ == "__main__":
    for name, value in measure():
        print(f"{name}: {value}")
