"""EXPLAIN's plans: the optimized plan (Materialize's operator tree, planned without Spark;
its text: tests/golden/plan/explain.test) reads what the query reads, and EXPLAIN PHYSICAL
PLAN is Spark's physical plan of the DataFrame a SELECT runs, in a real Spark session over
the embedded broker."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.embedded import produce

CATALOG = """
    CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092') WITH (VALIDATE = false);
    CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT JSON
      INCLUDE KEY AS k WITH (REDIRECT ERRORS = s_errors);
    CREATE TABLE t (a int, b text);
    CREATE TABLE u (a int, c int);
    CREATE VIEW v AS SELECT a, c FROM u WHERE c > 0;
"""
RELATIONS = {"s": ("k", "data"), "t": ("a", "b"), "u": ("a", "c"), "v": ("a", "c"), "s_errors": ("error", "error_code")}


@pytest.fixture(scope="module")
def planner():
    with sluice.Session(check_kafka=False) as session:
        session.execute_script(CATALOG)
        yield session


@st.composite
def queries(draw):
    """A SELECT over the catalog's relations: joins, a filter, grouping, ordering, a set
    operation; and the relations its FROM names, in order."""
    names = draw(st.lists(st.sampled_from(sorted(RELATIONS)), min_size=1, max_size=3))
    aliases = [f"r{i}" for i in range(len(names))]
    columns = [f"{alias}.{column}" for name, alias in zip(names, aliases) for column in RELATIONS[name]]
    source = f"{names[0]} AS r0"
    for i in range(1, len(names)):
        kind = draw(st.sampled_from(["JOIN", "LEFT JOIN", ","]))
        joined = [c for c in columns if int(c.split(".")[0][1:]) <= i]  # what the ON may name
        condition = f" ON {draw(st.sampled_from(joined))} IS NOT NULL" if kind != "," else ""
        source += f"{' ' if kind != ',' else ''}{kind} {names[i]} AS r{i}{condition}"
    picked = draw(st.lists(st.sampled_from(columns), min_size=1, max_size=3, unique=True))
    where = draw(st.sampled_from(["", f" WHERE {columns[0]} IS NOT NULL"]))
    if draw(st.booleans()):
        select = f"SELECT {picked[0]} AS g, count(*) AS n FROM {source}{where} GROUP BY 1"
        order = draw(st.sampled_from(["", " ORDER BY n DESC", " ORDER BY g LIMIT 2"]))
    else:
        outputs = ", ".join(f"{c} AS o{i}" for i, c in enumerate(picked))
        distinct = draw(st.sampled_from(["", "DISTINCT "]))
        select = f"SELECT {distinct}{outputs} FROM {source}{where}"
        order = draw(st.sampled_from(["", " ORDER BY 1", " LIMIT 3"]))
    return select + order, names


def _gets(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := re.search(r"Get materialize\.public\.(\w+)", line))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queries())
def test_the_optimized_plan_gets_what_the_query_reads(planner, query):
    """Each relation the query names is one Get (a view's own reads once, in its cte),
    and the plan's outputs are the query's columns."""
    sql, names = query
    planned = planner.plan(sluice.parse_one(sql))
    lines = [row[0] for row in planner.execute(f"EXPLAIN {sql}").rows]
    assert lines[0] == "Explained Query:"
    expected = [n for n in names if n != "v"] + (["u"] if "v" in names else [])
    assert sorted(_gets(lines)) == sorted(expected), "\n".join(lines)
    assert lines.count("    cte [l0 as materialize.public.v] =") == ("v" in names)
    top = lines[lines.index("  Return") + 1] if "  Return" in lines else lines[1]
    width = len(planned.columns)
    if top.lstrip().startswith("Project") or top.lstrip().startswith("Finish"):
        shown = re.search(r"(?:Project \(|output=\[)([^)\]]*)", top).group(1)
        assert len(shown.split(", ")) == width, "\n".join(lines)
    arity = sum(len(planner.catalog.current.get(n).columns) for n in names)
    for line in lines:
        for index in re.findall(r"#(\d+)", line):
            assert int(index) < arity + 4, line  # never past what the inputs and a Map give


@pytest.fixture
def session(spark, kafka):
    kafka.create_topic("orders", 1)
    produce(
        kafka.bootstrap,
        "orders",
        [(b"1", b'{"amount": 5}'), (b"2", b'{"amount": 7}'), (b"1", b'{"amount": 3}'), (b"3", b"{oops")],
        partition=0,
    )
    with sluice.Session() as s:
        s.execute_script(f"""
            CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
            CREATE SOURCE orders FROM KAFKA CONNECTION kafka (TOPIC 'orders')
              KEY FORMAT TEXT VALUE FORMAT JSON INCLUDE KEY AS id;
            CREATE TABLE customers (id text, name text);
            INSERT INTO customers VALUES ('1', 'ann'), ('2', 'bob');
        """)
        yield s


JOIN = (
    "SELECT c.name, count(*) AS n, sum((o.data->>'amount')::int) AS total "
    "FROM IGNORE ERRORS orders AS o JOIN customers AS c ON o.id = c.id GROUP BY c.name"
)
SPARK_JOINS = ("BroadcastHashJoin", "SortMergeJoin", "ShuffledHashJoin", "BroadcastNestedLoopJoin")


def test_explain_physical_plan_is_sparks_plan_of_the_join(session):
    result = session.execute(f"EXPLAIN PHYSICAL PLAN FOR {JOIN}")
    lines = [row[0] for row in result.rows]
    assert result.columns == ("Physical Plan",)
    assert lines[0] == "== Physical Plan =="
    text = "\n".join(lines)
    assert any(join in text for join in SPARK_JOINS), text
    assert "HashAggregate" in text and "Exchange" in text, text
    assert "BatchScan sluice_kafka" in text, text  # the source's read, by sluice's Kafka reader
    # The optimized plan of the same query, without Spark: the join and the aggregate.
    tree = [row[0] for row in session.execute(f"EXPLAIN {JOIN}").rows]
    assert tree == [
        "Explained Query:",
        "  Reduce group_by=[#3] aggregates=[count(*), sum(CAST((#1 ->> 'amount') AS INT))]",
        "    Join on=(#0 = #2)",
        "      Get materialize.public.orders // { errors: ignored (IGNORE ERRORS) }",
        "      Get materialize.public.customers",
    ]
    # Explaining collected nothing and changed nothing: the query gives its rows.
    assert sorted(session.execute(JOIN).rows) == [("ann", 2, 8), ("bob", 1, 7)]


def test_explain_physical_plan_of_a_view_and_what_it_refuses(session):
    session.execute("CREATE VIEW big AS SELECT id, (data->>'amount')::int AS amount FROM IGNORE ERRORS orders")
    lines = [row[0] for row in session.execute("EXPLAIN PHYSICAL PLAN FOR VIEW big").rows]
    assert lines[0] == "== Physical Plan ==" and any("BatchScan sluice_kafka" in line for line in lines)
    with pytest.raises(sluice.SqlError) as refused:
        session.execute("EXPLAIN PHYSICAL PLAN FOR SUBSCRIBE big")
    assert (refused.value.code, refused.value.message) == (
        "0A000",
        "EXPLAIN PHYSICAL PLAN FOR SUBSCRIBE is not supported yet",
    )


def test_sluice_plan_refuses_the_physical_plan_it_cannot_make(planner):
    """`sluice plan` starts no Spark: Spark's plan is refused by name, never shown empty."""
    with pytest.raises(sluice.SqlError) as refused:
        planner.plan_text(sluice.parse_one("EXPLAIN PHYSICAL PLAN FOR SELECT a FROM t"))
    assert (refused.value.code, refused.value.message) == (
        "0A000",
        "EXPLAIN PHYSICAL PLAN needs Spark, which sluice plan does not start",
    )
    shown = planner.plan_text(sluice.parse_one("EXPLAIN SELECT a FROM t WHERE a > 1")).split("\n")
    assert shown[-4:] == ["  Explained Query:", "    Project (#0)", "      Filter (#0 > 1)", "        Get materialize.public.t"]
