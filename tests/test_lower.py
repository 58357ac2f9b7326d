"""The lowering stage without a JVM: each rule's Spark SQL on golden cases
(tests/golden/lower/<rule>.test), properties of the evaluation rule, and a check that
lowering never loads pyspark.

Queries are planned against a fixed catalog (`CATALOG`) in a session that never starts
Spark. A record's directive names what runs on its planned query: a rule of
`lowering.RULES` alone, `check_evaluation` (the query and its errors queries, no other
rule), `fusion` (the same, fused: relation `u`'s rows carry flag `__u_flag`) or `lower`
(the whole stage, relations named `sluice_<name>`, fused).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import sluice
from sluice.lower import RULES, Fusion, lower, spark_sql
from sluice.lower.check_evaluation import Checked, check_evaluation
from sluice.plan.plans import QueryPlan
from tests.golden import Record, check_records, read_records

GOLDEN = Path(__file__).parent / "golden" / "lower"
FILES = sorted(GOLDEN.glob("*.test"))
CATALOG = """
CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092');
CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT;
CREATE TABLE t (a int, b int, big bigint, s text, x double precision, n numeric, j jsonb);
CREATE TABLE u (a int, j jsonb);
"""
RULE_NAMES = {rule.__name__: rule for rule in RULES}


@pytest.fixture(scope="module")
def session():
    with sluice.Session(check_kafka=False) as session:
        session.execute_script(CATALOG)
        yield session


def planned(session: sluice.Session, sql: str) -> QueryPlan:
    plan = session.plan(sluice.parse_one(sql))
    assert isinstance(plan, QueryPlan), plan
    return plan


def _names() -> Iterator[str]:
    return (f"__sluice_{i}" for i in itertools.count())


def _lines(sql: str, errors: list[str], flags: list[str | None], carried: list[str]) -> str:
    """A lowered query, then each errors query with its flag column, then the flags carried."""
    lines = [sql]
    for errors_sql, flag in zip(errors, flags, strict=True):
        lines.append(f"errors{f' [{flag}]' if flag else ''}: {errors_sql}")
    if carried:
        lines.append(f"carried: {', '.join(carried)}")
    return "\n".join(lines)


def _checked(checked: Checked) -> str:
    """`check_evaluation`'s result written as Spark SQL, no other rule applied."""
    errors = [spark_sql(query, rules=()) for query in checked.errors]
    return _lines(spark_sql(checked.query, rules=()), errors, checked.flags, checked.carried)


def render(record: Record, session: sluice.Session) -> str:
    try:
        expression = planned(session, record.input).expression
        directive = record.directive
        if directive in RULE_NAMES:
            return spark_sql(expression, rules=(RULE_NAMES[directive],))
        if directive == "check_evaluation":
            return _checked(check_evaluation(expression.copy()))
        if directive == "fusion":
            return _checked(check_evaluation(expression.copy(), Fusion(_names(), {"u": ["__u_flag"]})))
        assert directive == "lower", f"line {record.line}: unknown directive {directive}"
        relations = {name: f"sluice_{name}" for name in ("t", "u", "src")}
        relations["only errors(src)"] = "sluice_src_only"
        lowered = lower(expression, relations, Fusion(_names(), {"sluice_u": ["__u_flag"]}))
        return _lines(lowered.sql, lowered.errors, lowered.flags, lowered.carried)
    except sluice.SqlError as e:
        return f"ERROR: {e.message} ({e.code})"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_golden(path: Path, session: sluice.Session, request: pytest.FixtureRequest) -> None:
    check_records(path, lambda r: render(r, session), request.config.getoption("--rewrite"))


def test_every_rule_has_golden_cases() -> None:
    covered = {r.directive for path in FILES for r in read_records(path)}
    assert set(RULE_NAMES) | {"check_evaluation", "fusion", "lower"} <= covered


def test_lowering_leaves_its_input_alone(session: sluice.Session) -> None:
    expression = planned(session, "SELECT a / b FROM t WHERE j = '1'::jsonb").expression
    before = expression.sql()
    lower(expression, {"t": "sluice_t"}, Fusion(_names()))
    assert expression.sql() == before


def test_lowering_never_loads_spark() -> None:
    code = (
        "import sys, sluice\n"
        "from sluice.lower import lower\n"
        "with sluice.Session(check_kafka=False) as s:\n"
        f"    s.execute_script({CATALOG!r})\n"
        "    plan = s.plan(sluice.parse_one(\"SELECT a / b, j -> 'k' FROM t WHERE s IN (SELECT s FROM t)\"))\n"
        "    assert 'NULLIF' in lower(plan.expression, {}).sql\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


# ---------------------------------------------------------------- properties

_INTEGERS = ("a", "b", "big")


def _numbers(fallible: bool) -> st.SearchStrategy[str]:
    """Numeric expressions over t; with `fallible`, ones PostgreSQL may raise on."""
    atoms = st.sampled_from([*_INTEGERS, "x", "0", "1", "2", "NULL"])
    if fallible:
        casts = ["CAST(s AS integer)", "CAST(x AS smallint)", "CAST(s AS double precision)"]
        atoms = st.one_of(atoms, st.sampled_from(casts))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        conditions = _conditions(inner)
        shapes = [
            st.builds(lambda c, p, q: f"CASE WHEN {c} THEN {p} ELSE {q} END", conditions, inner, inner),
            st.builds(lambda p, q: f"COALESCE({p}, {q})", inner, inner),
        ]
        if fallible:
            operators = st.sampled_from(["+", "-", "*", "/", "%"])
            shapes.append(st.builds(lambda p, o, q: f"({p} {o} {q})", inner, operators, inner))
        return st.one_of(*shapes)

    return st.recursive(atoms, extend, max_leaves=6)


def _conditions(numbers: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Conditions over `numbers`: comparisons, IS NULL, one level of AND / OR / NOT."""
    simple = st.one_of(
        st.builds(lambda p, o, q: f"{p} {o} {q}", numbers, st.sampled_from(["=", "<", "<>"]), numbers),
        numbers.map(lambda p: f"{p} IS NULL"),
    )
    return st.one_of(
        simple,
        st.builds(lambda p, o, q: f"({p} {o} {q})", simple, st.sampled_from(["AND", "OR"]), simple),
        simple.map(lambda p: f"NOT ({p})"),
    )


def _queries(fallible: bool) -> st.SearchStrategy[str]:
    numbers = _numbers(fallible)
    where = st.one_of(st.just(""), _conditions(numbers).map(lambda c: f" WHERE {c}"))
    plain = st.builds(lambda p, q, w: f"SELECT {p} AS c1, {q} AS c2 FROM t{w}", numbers, numbers, where)
    grouped = st.builds(
        lambda p, w, h: f"SELECT a, sum({p}) AS c1 FROM t{w} GROUP BY a{h}",
        numbers,
        where,
        st.one_of(st.just(""), numbers.map(lambda q: f" HAVING max({q}) > 0")),
    )
    return st.one_of(plain, grouped)


PROPERTIES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _may_raise(node: exp.Expression) -> bool:
    """Whether Spark in ANSI mode may raise evaluating `node` itself."""
    if isinstance(node, (exp.Div, exp.Mod, exp.IntDiv)):
        divisor = node.expression
        if isinstance(divisor, exp.Nullif):
            return False
        return not (isinstance(divisor, exp.Literal) and divisor.is_number and float(divisor.this) != 0)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        return all(o.is_type(*exp.DataType.INTEGER_TYPES) for o in (node.this, node.expression))
    if type(node) is exp.Cast:
        return node.this.is_type(*exp.DataType.TEXT_TYPES) or node.to.is_type(*exp.DataType.INTEGER_TYPES)
    return False


@PROPERTIES
@given(sql=_queries(fallible=False))
def test_a_query_that_cannot_fail_is_unchanged(session: sluice.Session, sql: str) -> None:
    expression = planned(session, sql).expression
    lowered = lower(expression, {}, Fusion(_names()))
    assert lowered.sql == expression.sql(dialect="spark", identify=True)
    assert lowered.errors == [] and lowered.carried == []


@PROPERTIES
@given(sql=_queries(fallible=True))
def test_spark_never_raises_and_every_fallible_query_has_errors(session: sluice.Session, sql: str) -> None:
    expression = planned(session, sql).expression
    fallible = any(_may_raise(node) for node in expression.walk())
    checked = check_evaluation(expression.copy())
    assert not any(_may_raise(node) for node in checked.query.walk()), spark_sql(checked.query, rules=())
    assert bool(checked.errors) == fallible, sql
