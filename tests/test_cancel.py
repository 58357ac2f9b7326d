"""Cancelling a statement through `Session` (what the REPL's Ctrl-C and the wire protocol's
CancelRequest do): `cancellable` gives a handle, the statement runs inside
`running(handle)`, and `cancel(handle)` from another thread stops its Spark jobs — those
running, and those it starts afterwards — while other statements run on."""

from __future__ import annotations

import threading
import time

import pytest

from sluice.errors import SqlError
from sluice.session import Session
from tests.support.spark_jobs import active_jobs, wait_for

LONG_QUERY = "SELECT count(*) FROM wide a, wide b, wide c WHERE a.n + b.n + c.n = -1"


@pytest.fixture
def session(spark, tmp_path):
    with Session(tmp_path / "data", check_kafka=False) as session:
        session.execute("CREATE TABLE wide (n int)")
        session.execute("INSERT INTO wide VALUES " + ", ".join(f"({i})" for i in range(3000)))
        yield session


def _run(session: Session, handle, sql: str) -> tuple[threading.Thread, list[BaseException]]:
    """`sql` run as `handle`'s statement on a thread of its own, and what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            with session.running(handle):
                session.execute(sql)
        except BaseException as e:  # handed to the test
            raised.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    return worker, raised


def _assert_cancelled(raised: list[BaseException], handle) -> None:
    """The statement failed as Spark fails a job of a cancelled group: the handle's."""
    assert len(raised) == 1 and isinstance(raised[0], SqlError), raised
    assert "[SPARK_JOB_CANCELLED] Job" in raised[0].message, raised[0].message
    assert f"cancelled part of cancelled job group {handle.group}" in raised[0].message, raised[0].message


def test_a_cancelled_statement_stops_its_spark_jobs_and_the_session_goes_on(session, spark) -> None:
    handle = session.cancellable(LONG_QUERY)
    worker, raised = _run(session, handle, LONG_QUERY)
    assert wait_for(lambda: active_jobs(spark)), "the query started no Spark job"
    assert wait_for(lambda: session.progress(handle).tasks is not None), "no task of the statement in progress"
    done, total = session.progress(handle).tasks
    assert 0 <= done < total
    session.cancel(handle)
    session.cancel(handle)  # a second cancel (Ctrl-C again, a CancelRequest and a disconnect) changes nothing
    worker.join(60)
    assert not worker.is_alive(), "the cancelled statement still runs"
    _assert_cancelled(raised, handle)
    assert wait_for(lambda: not active_jobs(spark), 30), "the cancelled statement's jobs still run"
    assert session.progress(handle).tasks is None
    # The session, and the thread's next statement with a handle of its own, go on.
    with session.running(session.cancellable("SELECT count(*) FROM wide")):
        assert session.execute("SELECT count(*) FROM wide").rows == [(3000,)]


def test_a_statement_cancelled_before_it_runs_has_its_jobs_cancelled_as_they_start(session, spark) -> None:
    # A Ctrl-C between the handle and the statement's start (the REPL's worker thread not
    # yet running it): what the statement then starts on Spark is cancelled.
    handle = session.cancellable(LONG_QUERY)
    session.cancel(handle)
    began = time.monotonic()
    worker, raised = _run(session, handle, LONG_QUERY)
    worker.join(90)
    assert not worker.is_alive(), "the statement cancelled before it ran still runs"
    _assert_cancelled(raised, handle)
    assert wait_for(lambda: not active_jobs(spark), 30)
    print(f"\nended in {time.monotonic() - began:.1f} s")
