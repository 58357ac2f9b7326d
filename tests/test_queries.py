"""Queries on Spark over Kafka sources: jsonb operators with PostgreSQL's results, and
evaluation errors as data in views over sources (seed 000's "Limitations"), against the
embedded broker and a real Spark session. Tables' side: sqllogic/evaluation_errors.slt."""

from __future__ import annotations

import datetime
import json
import time
from decimal import Decimal

import pytest

import sluice
from sluice.kafka.embedded import produce
from tests.test_ingest import failure, rows

DOCUMENTS = [
    {"user": {"id": "7", "tags": ["a", "b"]}, "amount": 1.5, "note": None, "ok": True},
    {"user": {"id": "x"}, "amount": 2, "odd key": "yes"},
    [1, "two", {"three": 3}],
    "just text",
]


@pytest.fixture
def session(spark, kafka):
    kafka.create_topic("events", 1)
    produce(kafka.bootstrap, "events", [(None, json.dumps(d).encode()) for d in DOCUMENTS], partition=0)
    with sluice.Session() as s:
        s.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        s.execute("CREATE SOURCE events FROM KAFKA CONNECTION kafka (TOPIC 'events') FORMAT JSON INCLUDE OFFSET")
        yield s


def test_jsonb_operators(session) -> None:
    assert rows(session, """
        SELECT data->'user', data->>'amount', data->'note', data->>'note', data->'nope',
               data#>'{user,tags,1}', data#>>'{user,tags}', data->>'odd key', jsonb_typeof(data)
        FROM events ORDER BY "offset"
    """) == [
        ('{"id":"7","tags":["a","b"]}', "1.5", "null", None, None, '"b"', '["a","b"]', None, "object"),
        ('{"id":"x"}', "2", None, None, None, None, None, "yes", "object"),
        (None, None, None, None, None, None, None, None, "array"),
        (None, None, None, None, None, None, None, None, "string"),
    ]
    assert rows(session, """
        SELECT data->1, data->2->>'three', jsonb_typeof(data->0), jsonb_typeof(data->'ok'),
               jsonb_typeof(data->'note'), data::text
        FROM events WHERE "offset" IN (0, 2) ORDER BY "offset"
    """) == [
        (None, None, None, "boolean", "null",
         '{"amount":1.5,"note":null,"ok":true,"user":{"id":"7","tags":["a","b"]}}'),
        ('"two"', "3", "number", None, None, '[1,"two",{"three":3}]'),
    ]
    assert rows(session, "SELECT (data->>'amount')::numeric * 2, data->'user'->>'id' = '7' FROM events WHERE \"offset\" = 0") == [
        (Decimal(3), True)
    ]
    session.execute("CREATE VIEW v AS SELECT data->'user' AS u, data#>>'{a}' AS n, jsonb_typeof(data) AS t FROM events")
    columns = rows(session, "SHOW COLUMNS FROM v")
    assert [(c[0], c[2]) for c in columns] == [("u", "jsonb"), ("n", "text"), ("t", "text")]


def test_a_failing_cast_in_a_view_over_a_source_is_an_error_of_that_view(session) -> None:
    """Seed 000's limitation: `(data->>'userid')::int` in a view can fail per row."""
    session.execute("CREATE VIEW ids AS SELECT (data#>>'{user,id}')::int AS id FROM events WHERE jsonb_typeof(data) = 'object'")
    expected = 'Evaluation error: invalid input syntax for type integer: "x"'
    assert failure(session, "SELECT * FROM ids", "22P02") == expected
    # The view's collection is in error, whatever the query over it filters.
    assert failure(session, "SELECT count(*) FROM ids WHERE id > 100", "22P02") == expected
    # The rows that do not fail are right where the failing ones are not evaluated.
    assert rows(session, "SELECT (data#>>'{user,id}')::int FROM events WHERE data#>>'{user,id}' <> 'x'") == [(7,)]
    # IGNORE ERRORS hides a source's decode errors, not a view's evaluation errors.
    session.execute("CREATE VIEW ids2 AS SELECT (data#>>'{user,id}')::int AS id FROM IGNORE ERRORS events")
    assert failure(session, "SELECT * FROM ids2", "22P02") == expected


def test_a_source_error_comes_before_a_view_error(session, kafka) -> None:
    produce(kafka.bootstrap, "events", [(None, b"{broken")], partition=0)
    session.execute("CREATE VIEW ids AS SELECT (data->'user'->>'id')::int AS id FROM events")
    assert failure(session, "SELECT * FROM ids").startswith("Decode error: Failed to decode JSON")
    session.execute("CREATE VIEW clean AS SELECT (data->'user'->>'id')::int AS id FROM IGNORE ERRORS events")
    assert failure(session, "SELECT * FROM clean", "22P02") == 'Evaluation error: invalid input syntax for type integer: "x"'


@pytest.fixture
def errs_reads(monkeypatch) -> list[int]:
    """How many guards each statement read apart from its query (in the query's job or
    after it), appended as statements run."""
    from sluice.render import query

    reads: list[int] = []
    collect, first_error = query.QueryRenderer.collect, query._first_error

    def counted_collect(self, *args, **kwargs):
        reads.append(0)
        return collect(self, *args, **kwargs)

    def counted_first_error(guards):
        reads[-1] += len(guards)
        return first_error(guards)

    def counted_failing_on(self, frame, read, guards):
        reads[-1] += len(read)
        return failing_on(self, frame, read, guards)

    failing_on = query.QueryRenderer._failing_on
    monkeypatch.setattr(query.QueryRenderer, "collect", counted_collect)
    monkeypatch.setattr(query.QueryRenderer, "_failing_on", counted_failing_on)
    monkeypatch.setattr(query, "_first_error", counted_first_error)
    return reads


def test_a_query_without_errors_is_checked_in_its_own_pass(session, kafka, errs_reads) -> None:
    """The source's messages are observed on the way into the query and a view's
    evaluation errors ride along in hidden columns: no errs collection is read."""
    session.execute("CREATE VIEW kinds AS SELECT jsonb_typeof(data) AS t, count(*) AS n, sum(1 / length(data::text)) AS z FROM events GROUP BY 1")
    assert rows(session, "SELECT count(*) FROM events") == [(4,)]
    assert sorted(rows(session, "SELECT t, n FROM kinds WHERE n > 1")) == [("object", 2)]
    assert errs_reads == [0, 0]
    # A LIMIT stops the query short of some messages: the source's errs are read apart.
    assert len(rows(session, "SELECT data FROM events LIMIT 1")) == 1
    assert errs_reads[-1] == 1
    produce(kafka.bootstrap, "events", [(None, b"{broken")], partition=0)
    assert failure(session, "SELECT t FROM kinds").startswith("Decode error: Failed to decode JSON")
    assert errs_reads[-1] == 1  # only to name the error the observation saw


def test_an_upsert_source_without_errors_is_checked_in_its_own_pass(session, kafka, errs_reads) -> None:
    """No message an error: no standing error either. A retracted error makes the query
    look at the standing errors (there are none), a standing one fails it."""
    kafka.create_topic("accounts", 1)
    produce(kafka.bootstrap, "accounts", [(b"a", b'{"n": 1}'), (b"b", b'{"n": 2}'), (b"a", b'{"n": 3}')], partition=0)
    session.execute(
        "CREATE SOURCE accounts FROM KAFKA CONNECTION kafka (TOPIC 'accounts') "
        "KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT"
    )
    assert sorted(rows(session, "SELECT key, (data->>'n')::int FROM accounts")) == [("a", 3), ("b", 2)]
    assert errs_reads == [0]
    produce(kafka.bootstrap, "accounts", [(b"b", b"{broken"), (b"b", b'{"n": 4}')], partition=0)
    assert sorted(rows(session, "SELECT key, (data->>'n')::int FROM accounts")) == [("a", 3), ("b", 4)]
    assert errs_reads[-1] == 1
    produce(kafka.bootstrap, "accounts", [(b"a", b"{broken")], partition=0)
    assert failure(session, "SELECT count(*) FROM accounts").startswith("Envelope error: Upsert: Value error:")


def test_each_evaluation_error_reports_its_sqlstate(spark, tmp_path) -> None:
    """PostgreSQL's SQLSTATE with DESIGN §4's text, whether sluice found the error row by
    row or Spark raised it (a subquery yielding many rows)."""
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute("CREATE TABLE t (a int, s text)")
        session.execute("INSERT INTO t VALUES (0, 'x'), (2147483647, '99999999999')")
        for sql, code, words in [
            ("SELECT 1 / a FROM t", "22012", "division by zero"),
            ("SELECT a + 1 FROM t WHERE a > 0", "22003", "integer out of range"),
            ("SELECT s::int FROM t WHERE a > 0", "22003", 'value "99999999999" is out of range for type integer'),
            ("SELECT s::int FROM t WHERE a = 0", "22P02", 'invalid input syntax for type integer: "x"'),
            ("SELECT (SELECT a FROM t)", "21000", "more than one row returned by a subquery used as an expression"),
        ]:
            assert failure(session, sql, code) == f"Evaluation error: {words}", sql


def test_timestamps_show_the_sessions_wall_clock_whatever_the_local_time_zone(spark, monkeypatch) -> None:
    # PySpark converts a collected timestamp through the Python process's time zone, and
    # that conversion fails on year 1's first day: sluice collects the session's (UTC).
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        with sluice.Session() as s:
            (row,) = s.execute(
                "SELECT TIMESTAMP '2024-01-02 03:04:05', TIMESTAMP '0001-01-01 00:00:00',"
                " TIMESTAMP '9999-12-31 23:59:59.999999', ROW(TIMESTAMP '2024-07-01 12:00:00', 1),"
                " ARRAY[TIMESTAMP '2024-07-01 12:00:00'], TIMESTAMP '2024-01-02 03:04:05' AS same"
            ).rows
    finally:
        monkeypatch.undo()
        time.tzset()
    july = datetime.datetime(2024, 7, 1, 12)
    assert row == (
        datetime.datetime(2024, 1, 2, 3, 4, 5),
        datetime.datetime(1, 1, 1),
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
        (july, 1),
        [july],
        datetime.datetime(2024, 1, 2, 3, 4, 5),
    )
