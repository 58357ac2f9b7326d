"""The round trip as the oracle: random changes to a table and to an upsert source
(inserts, updates, deletes, corrupt messages — each corrupt one overwritten in the end, so
the sink stalls and resumes) → a sink's topic → a sluice UPSERT source reading that topic
back in the same format equals `SELECT * FROM relation`."""

from __future__ import annotations

import itertools
import json
import time

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import sluice
from sluice.errors import SourceFailed
from sluice.kafka.embedded import produce

DRAIN_SECONDS = 120
RESTART_SECONDS = 60
KEYS = st.integers(0, 5)
# (key, value): None deletes, "bad" is a corrupt message (in the source; the table skips it)
CHANGES = st.lists(st.tuples(KEYS, st.one_of(st.none(), st.just("bad"), st.integers(-3, 3))), max_size=12)
numbers = itertools.count()


def _table_statements(name: str, changes, held: dict) -> list[str]:
    statements = []
    for key, value in changes:
        if value == "bad":
            continue
        if value is None:
            statements.append(f"DELETE FROM {name} WHERE k = {key}")
            held.pop(key, None)
        elif key in held:
            statements.append(f"UPDATE {name} SET v = {value} WHERE k = {key}")
            held[key] = value
        else:
            statements.append(f"INSERT INTO {name} VALUES ({key}, {value})")
            held[key] = value
    return statements


def _messages(changes) -> list[tuple[bytes, bytes | None]]:
    return [
        (str(key).encode(), None if value is None else b"{bad" if value == "bad" else json.dumps({"v": value}).encode())
        for key, value in changes
    ]


def _rows(session: sluice.Session, sql: str) -> list[tuple]:
    """The query's rows; a source whose stream failed on a transient Spark fault (a loaded
    machine's timeouts) restarts by itself, so the query is asked again meanwhile."""
    deadline = time.monotonic() + RESTART_SECONDS
    while True:
        try:
            return session.execute(sql).rows
        except SourceFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _read_back(session: sluice.Session, topic: str, columns: tuple[str, ...]) -> set:
    name = f"back_{topic}"
    session.execute(
        f"CREATE SOURCE {name} FROM KAFKA CONNECTION kafka (TOPIC '{topic}') "
        "KEY FORMAT JSON VALUE FORMAT JSON ENVELOPE UPSERT"
    )
    return {
        tuple(json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else v for v in map(json.loads(data).get, columns))
        for (data,) in _rows(session, f"SELECT data FROM {name}")
    }


# Each example costs Spark time: few, and no shrinking (a failure reports its example as drawn).
@settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(table_changes=st.lists(CHANGES, min_size=1, max_size=2), source_changes=st.lists(CHANGES, min_size=1, max_size=2))
def test_sink_topic_read_back_equals_its_relation(spark, kafka, table_changes, source_changes) -> None:
    n = next(numbers)
    kafka.create_topic(f"in{n}", 1)
    with sluice.Session() as session:
        session.execute_script(
            f"""
            CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
            CREATE TABLE t (k int NOT NULL, v int);
            CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 'in{n}') KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT;
            CREATE SINK ts FROM t INTO KAFKA CONNECTION kafka (TOPIC 'tout{n}') KEY (k) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
            CREATE SINK ss FROM src INTO KAFKA CONNECTION kafka (TOPIC 'sout{n}') KEY (key) FORMAT JSON ENVELOPE UPSERT;
            """
        )
        held: dict = {}
        for table_step, source_step in itertools.zip_longest(table_changes, source_changes, fillvalue=[]):
            for statement in _table_statements("t", table_step, held):
                session.execute(statement)
            produce(kafka.bootstrap, f"in{n}", _messages(source_step))
            session.drain_sinks(DRAIN_SECONDS)
        last = dict((key, value) for changes in source_changes for key, value in changes)
        produce(kafka.bootstrap, f"in{n}", _messages([(k, 0) for k, v in last.items() if v == "bad"]))
        session.drain_sinks(DRAIN_SECONDS)
        sinks = session.execute("SHOW SINKS").rows
        assert [row[3] for row in sinks] == ["running", "running"], sinks

        table = set(_rows(session, "SELECT k, v FROM t"))
        assert _read_back(session, f"tout{n}", ("k", "v")) == table
        source = set(_rows(session, "SELECT key, data FROM src"))
        assert _read_back(session, f"sout{n}", ("key", "data")) == source
