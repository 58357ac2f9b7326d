"""The wire protocol's cost (`sluice serve`): a statement's round trip over the wire
(psycopg 3, one connection) against the same statement through `Session.execute`, and
queries per second over a small materialized view with 1, 4 and 16 clients.

Usage: python bench/pgwire.py [--rounds N] [--seconds S]

Printed: p50 and p90 of N round trips of `SELECT 1` (a Spark job) and of `SHOW TABLES`
(the catalog alone, so nearly all of its time is the protocol's), each through the
session and over the wire, and the p50 added by the wire (target: <= 2 ms); then, for
1, 4 and 16 clients each running `SELECT * FROM mv` for S seconds, queries per second
and their p50 latency; and the machine's load average, which these numbers depend on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time

import psycopg

from sluice.pgwire.server import Server
from sluice.session import Session


def timings(run, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        began = time.perf_counter()
        run()
        out.append((time.perf_counter() - began) * 1000)
    return out


def percentiles(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"p50 {statistics.median(ms):7.2f} ms  p90 {ms[int(len(ms) * 0.9)]:7.2f} ms"


def clients(dsn: str, count: int, seconds: float) -> tuple[float, float]:
    """(queries per second, p50 ms) of `count` clients querying for `seconds`."""
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(count + 1)

    def client() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            start.wait()
            end = time.monotonic() + seconds
            mine = []
            while time.monotonic() < end:
                began = time.perf_counter()
                conn.execute("SELECT * FROM mv").fetchall()
                mine.append((time.perf_counter() - began) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(count)]
    for t in threads:
        t.start()
    start.wait()
    began = time.monotonic()
    for t in threads:
        t.join()
    return len(latencies) / (time.monotonic() - began), statistics.median(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data, Session(data) as session:
        server = Server(session, port=0)
        threading.Thread(target=server.serve, daemon=True).start()
        dsn = f"host=127.0.0.1 port={server.address[1]} user=materialize"
        session.execute("CREATE TABLE t (a int)")
        session.execute("INSERT INTO t VALUES " + ", ".join(f"({i})" for i in range(1000)))
        session.execute("CREATE MATERIALIZED VIEW mv AS SELECT a % 10 AS k, count(*) AS n FROM t GROUP BY a % 10")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for sql in ("SELECT 1", "SHOW TABLES"):
                session.execute(sql), conn.execute(sql).fetchall()  # warm up
                direct = timings(lambda: session.execute(sql), args.rounds)
                wire = timings(lambda: conn.execute(sql).fetchall(), args.rounds)
                added = statistics.median(wire) - statistics.median(direct)
                print(f"{sql:12}  session: {percentiles(direct)}   wire: {percentiles(wire)}   added p50 {added:+.2f} ms")
        for count in (1, 4, 16):
            qps, p50 = clients(dsn, count, args.seconds)
            print(f"{count:2} clients over mv: {qps:7.1f} queries/s  p50 {p50:8.1f} ms")
        print("load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores")
        server.stop()


if __name__ == "__main__":
    main()
