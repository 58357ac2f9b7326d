"""INSERT, UPDATE and DELETE are planned before anything runs: their errors carry the
statement's position, their plans hold every query they run (views included), and an
INSERT's query fills the table's columns in order. No Spark: planning only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice.plan.plans import QueryPlan, WritePlan

COLUMNS = ("a", "b", "c", "d")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    with sluice.Session(tmp_path_factory.mktemp("writes"), check_kafka=False) as s:
        s.execute_script(
            "CREATE TABLE t (a int NOT NULL, b text DEFAULT 'x', c double precision, d int);"
            "CREATE TABLE u (x int, y text);"
            "CREATE VIEW v AS SELECT x, y FROM u;"
            "CREATE VIEW w AS SELECT x FROM v WHERE x > 0"
        )
        yield s


def planned(session, sql: str):
    return session.plan(sluice.parse_one(sql))


def caret(session, sql: str) -> tuple[str, str]:
    """The error's code and the statement's text from its caret on."""
    with pytest.raises(sluice.SqlError) as info:
        planned(session, sql)
    assert info.value.span is not None, info.value
    return info.value.code, sql[info.value.span.start :]


@pytest.mark.parametrize(
    ("sql", "code", "at"),
    [
        ("INSERT INTO t (a, nope) VALUES (1, 2)", "42703", "nope) VALUES"),
        ("INSERT INTO t (a) VALUES (1, 2)", "42601", "2)"),
        ("INSERT INTO t SELECT x, y, x, x, y FROM u", "42601", "y FROM u"),
        ("INSERT INTO t (a) SELECT nope FROM u", "42703", "nope FROM u"),
        ("INSERT INTO t (a) SELECT x FROM nowhere", "42704", "nowhere"),
        ("UPDATE t SET nope = 1 WHERE a = 1", "42703", "nope = 1"),
        ("UPDATE t SET b = nope WHERE a = 1", "42703", "nope WHERE"),
        ("DELETE FROM t WHERE nope = 1", "42703", "nope = 1"),
        ("DELETE FROM w", "42809", "w"),
    ],
)
def test_write_errors_point_into_the_statement(session, sql: str, code: str, at: str) -> None:
    found, rest = caret(session, sql)
    assert (found, rest[: len(at)]) == (code, at)


def test_an_insert_of_literals_is_planned_as_its_rows(session) -> None:
    plan = planned(session, "INSERT INTO t (a, b, c) VALUES (1, 'y', 1.5), (-2, NULL, NULL)")
    assert isinstance(plan, WritePlan) and plan.rows is None
    assert plan.literal_rows == ((1, "y", 1.5, None), (-2, None, None, None))
    # b is left out and has a default; 1 + 1 needs evaluating: queries compute them.
    for sql in ("INSERT INTO t (a) VALUES (1)", "INSERT INTO t (a, b) VALUES (1 + 1, 'y')"):
        plan = planned(session, sql)
        assert plan.literal_rows is None and plan.rows is not None


def test_a_write_carries_every_query_it_runs(session) -> None:
    insert = planned(session, "INSERT INTO t (d, a) SELECT x, x FROM w")
    (read,) = insert.rows.reads
    assert [c.name for c in insert.rows.columns] == list(COLUMNS)
    # w reads v, which reads u: each view's query is planned inside the read of it.
    assert isinstance(read.query, QueryPlan)
    (inner,) = read.query.reads
    assert (inner.query.reads[0].item_id, inner.query.reads[0].query) == (
        session.catalog.current.get("u").id,
        None,
    )
    update = planned(session, "UPDATE t SET b = 'z' WHERE a > 1")
    delete = planned(session, "DELETE FROM t WHERE a > 1")
    for write in (update, delete):
        assert [c.name for c in write.rows.columns] == list(COLUMNS)
        assert [c.name for c in write.matched.columns] == ["n"]


@settings(max_examples=40, deadline=None)
@given(st.permutations(COLUMNS).flatmap(lambda p: st.integers(1, len(p)).map(lambda n: p[:n])))
def test_an_insert_fills_the_table_columns_from_its_targets(session, targets) -> None:
    """Whatever target columns an INSERT names, in whatever order, its query yields the
    table's columns in order: a named one from its place in the statement's rows, an
    unnamed one its default (b's is 'x') or NULL."""
    values = ", ".join(f"{i} + 0" for i in range(len(targets)))  # not literals: a query
    plan = planned(session, f"INSERT INTO t ({', '.join(targets)}) VALUES ({values})")
    outputs = {s.alias: s.this.sql() for s in plan.rows.expression.selects}
    assert list(outputs) == list(COLUMNS)
    for name in COLUMNS:
        if name in targets:
            expected = f"__inserted.column{targets.index(name) + 1}"
        else:
            expected = "'x'" if name == "b" else "NULL"
        assert outputs[name] == expected
