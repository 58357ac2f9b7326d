"""CREATE SINK's plan-time checks, with Materialize's texts and their DETAIL and HINT
(sqllogic/sink_checks.slt has each message), and EXPLAIN PYSPARK of a sink with a schema
registry, which registers nothing. JVM-free."""

from __future__ import annotations

import pytest

import sluice
from tests.support.registry import Registry

SETUP = """
    CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092');
    CREATE TABLE t (id int, name text);
    CREATE SOURCE up FROM KAFKA CONNECTION kafka (TOPIC 'in') KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT;
    CREATE VIEW up_v AS SELECT key AS k, data FROM up;
"""


@pytest.fixture
def session(tmp_path):
    with sluice.Session(tmp_path, check_kafka=False) as s:
        s.execute_script(SETUP)
        yield s


def refused(session, sql: str) -> sluice.SqlError:
    with pytest.raises(sluice.SqlError) as info:
        session.execute(sql)
    return info.value


def test_a_key_with_no_known_unique_key_is_refused_in_materializes_words(session) -> None:
    error = refused(session, "CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (name, id) FORMAT JSON ENVELOPE UPSERT")
    assert (error.code, error.message) == ("22023", "upsert key could not be validated as unique")
    assert error.detail == (
        'Materialize could not prove that the specified upsert envelope key ("name", "id") was a unique key '
        'of the underlying relation "t". There are no known valid unique keys for the underlying relation.'
    )
    assert error.hint == "See: https://materialize.com/s/sink-key-selection"


def test_the_known_keys_are_listed(session) -> None:
    error = refused(session, "CREATE SINK s FROM up_v INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (data) FORMAT JSON ENVELOPE UPSERT")
    assert error.detail.endswith('The following keys are known to be unique for the underlying relation:\n  ("k")')
    session.execute("CREATE SINK s FROM up_v INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (k) FORMAT JSON ENVELOPE UPSERT")
    assert session.catalog.current.get("s").details.key == ("k",)


def test_not_enforced_is_kept_in_the_sinks_definition(session) -> None:
    session.execute("CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (id) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT")
    assert "KEY (id) NOT ENFORCED FORMAT JSON" in session.execute("SHOW CREATE SINK s").rows[0][1]


def test_explaining_a_sink_with_a_schema_registry_registers_nothing(tmp_path) -> None:
    registry = Registry({})
    try:
        with sluice.Session(tmp_path, check_kafka=False) as session:
            session.execute_script(SETUP + f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
            rows = session.execute(
                "EXPLAIN PYSPARK FOR CREATE SINK s FROM up INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (key) "
                "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT"
            ).rows
        program = "\n".join(row[0] for row in rows)
        assert 'schema_id=schema_ids["o-key"]' in program and 'schema_id=schema_ids["o-value"]' in program
        assert registry.subjects == {}
    finally:
        registry.close()
