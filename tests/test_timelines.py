"""Timelines (DESIGN §5): every dataflow statement is accepted iff the relations it reaches
lie on at most one timeline, whichever path (SELECT, views, SUBSCRIBE, sinks, EXPLAIN)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog.timeline import EPOCH_MS, EXTERNAL, USER, Timeline

# How a source says its timeline → the timeline it gets.
TIMELINE_OPTIONS = {
    "": EPOCH_MS,
    " WITH (TIMELINE = 'mz_epoch_ms')": EPOCH_MS,
    " WITH (EPOCH MS TIMELINE = true)": EPOCH_MS,
    " WITH (TIMELINE = 'x')": Timeline(USER, "x"),
    " WITH (TIMELINE = 'y')": Timeline(USER, "y"),
    " WITH (EPOCH MS TIMELINE = false)": None,  # External(<its own name>)
}


@st.composite
def catalogs(draw):
    """Sources with random timelines, tables, and views over random subsets of them, plus
    the model: the set of timelines each relation reaches (views only when consistent)."""
    session = sluice.Session(check_kafka=False)
    session.execute("CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092')")
    reach: dict[str, set[Timeline]] = {}
    for i in range(draw(st.integers(1, 4))):
        name = f"s{i}"
        option = draw(st.sampled_from(sorted(TIMELINE_OPTIONS)))
        session.execute(
            f"CREATE SOURCE {name} FROM KAFKA CONNECTION kafka (TOPIC '{name}') FORMAT TEXT{option}"
        )
        reach[name] = {TIMELINE_OPTIONS[option] or Timeline(EXTERNAL, name)}
    if draw(st.booleans()):
        session.execute("CREATE TABLE t (text text)")
        reach["t"] = {EPOCH_MS}
    for i in range(draw(st.integers(0, 4))):
        inputs = draw(st.lists(st.sampled_from(sorted(reach)), min_size=1, max_size=3))
        timelines = set().union(*(reach[n] for n in inputs))
        name = f"v{i}"
        statement = f"CREATE VIEW {name} AS {union_of(inputs)}"
        if len(timelines) <= 1:
            session.execute(statement)
            reach[name] = timelines
    return session, reach


def union_of(names: list[str]) -> str:
    return " UNION ALL ".join(f"SELECT text FROM {n}" for n in names)


def dataflows(names: list[str]) -> list[str]:
    query = union_of(names)
    return [
        query,
        f"CREATE VIEW probe AS {query}",
        f"CREATE MATERIALIZED VIEW probe AS {query}",
        f"SUBSCRIBE ({query})",
        f"EXPLAIN {query}",
        f"EXPLAIN TIMELINE FOR SELECT * FROM {names[0]} WHERE text IN ({union_of(names[1:] or names)})",
    ]


def accepted(session: sluice.Session, sql: str) -> bool:
    try:
        session.plan(sluice.parse_one(sql))
    except sluice.SqlError as e:
        assert e.message == "multiple timelines within one dataflow are not supported", e.message
        assert e.code == "0A000"
        return False
    return True


@settings(max_examples=60, deadline=None)
@given(catalogs(), st.data())
def test_accepted_iff_at_most_one_timeline(catalog, data) -> None:
    session, reach = catalog
    names = data.draw(st.lists(st.sampled_from(sorted(reach)), min_size=1, max_size=4))
    expected = len(set().union(*(reach[n] for n in names))) <= 1
    for sql in dataflows(names):
        assert accepted(session, sql) == expected, sql
    sink = f"CREATE SINK out FROM {names[0]} INTO KAFKA CONNECTION kafka (TOPIC 'o') FORMAT JSON ENVELOPE DEBEZIUM"
    assert accepted(session, sink) == (len(reach[names[0]]) <= 1)
    session.close()


def test_constants_have_no_timeline_and_join_anything() -> None:
    with sluice.Session(check_kafka=False) as session:
        session.execute("CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092')")
        session.execute(
            "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT WITH (TIMELINE = 'x')"
        )
        assert session.execute("EXPLAIN TIMELINE FOR SELECT 1").rows == [("none",)]
        plan = session.plan(sluice.parse_one("SELECT * FROM s, (VALUES (1)) AS v(n)"))
        assert str(plan.timeline) == "User(x)"
