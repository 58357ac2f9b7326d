"""ENVELOPE UPSERT on a snapshot: latest value per key, keyed and retractable errors,
INLINE / PROPAGATE, dead-letter logging — against the embedded broker and Spark."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.storage.source import UPSERT_NULL_KEY

BAD = b"{bad"
BAD_TEXT = (
    'Failed to decode JSON: key must be a string at line 1 column 2 (original text: {bad, original bytes: "7b626164")'
)


@pytest.fixture
def upsert(spark, kafka):
    kafka.create_topic("u", 1)
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")

        def create(name: str, errors: str = "", extra: str = "") -> None:
            session.execute(
                f"CREATE SOURCE {name} FROM KAFKA CONNECTION kafka (TOPIC 'u') KEY FORMAT TEXT "
                f"VALUE FORMAT JSON INCLUDE OFFSET ENVELOPE UPSERT {errors} {extra}"
            )

        yield session, create, lambda messages: produce(kafka.bootstrap, "u", messages, partition=0)


def test_latest_value_wins_and_null_deletes(upsert) -> None:
    session, create, send = upsert
    send([(b"a", b'{"v":1}'), (b"b", b'{"v":2}'), (b"a", b'{"v":3}'), (b"b", None), (b"c", None)])
    create("s")
    assert session.execute("SELECT key, data, \"offset\" FROM s").rows == [("a", '{"v":3}', 2)]


def test_value_errors_are_keyed_and_retracted(upsert) -> None:
    session, create, send = upsert
    send([(b"a", b'{"v":1}'), (b"a", BAD), (b"b", b'{"v":2}')])
    create("s")
    with pytest.raises(sluice.SqlError) as info:
        session.execute("SELECT count(*) FROM s WHERE key = 'b'")
    assert info.value.message == (
        f'Envelope error: Upsert: Value error: {BAD_TEXT}, decoded key: Row{{[String("a")]}}'
    )
    assert session.execute("SELECT key FROM IGNORE ERRORS s").rows == [("b",)]
    send([(b"a", b'{"v":9}')])  # a later good value replaces the error
    assert sorted(session.execute("SELECT key, data FROM s").rows) == [("a", '{"v":9}'), ("b", '{"v":2}')]
    send([(b"a", BAD), (b"a", None)])  # so does a tombstone
    assert session.execute("SELECT key FROM s").rows == [("b",)]


def test_key_decode_and_null_key_errors_are_retracted_by_null_values(upsert) -> None:
    session, create, send = upsert
    send([(b"\xff", b'{"v":1}'), (None, b'{"v":2}'), (b"ok", b'{"v":3}')])
    create("s")
    assert sorted(session.execute("SELECT message FROM ONLY ERRORS s").rows) == [
        ('Envelope error: Upsert: Key decode: Failed to decode UTF-8 (original bytes: "ff")',),
        (UPSERT_NULL_KEY,),
    ]
    send([(b"\xff", None), (None, None)])
    assert session.execute("SELECT key FROM s").rows == [("ok",)]


def test_inline_puts_the_error_in_the_row_and_propagate_also_fails(upsert) -> None:
    session, create, send = upsert
    send([(b"a", b'{"v":1}'), (b"a", BAD), (b"b", b'{"v":2}')])
    create("inline", "(VALUE DECODING ERRORS = INLINE AS problem)")
    rows = sorted(session.execute('SELECT key, problem, data, "offset" FROM inline').rows)
    assert rows[0][0] == "a" and rows[0][1].description == BAD_TEXT and rows[0][2:] == (None, 1)
    assert rows[1] == ("b", None, '{"v":2}', 2)
    create("both", "(VALUE DECODING ERRORS = (INLINE, PROPAGATE))")
    with pytest.raises(sluice.SqlError, match="^Envelope error: Upsert: Value error: "):
        session.execute("SELECT * FROM both")
    assert len(session.execute("SELECT * FROM IGNORE ERRORS both").rows) == 2


def test_dead_letter_table_logs_every_error_even_retracted_ones(upsert) -> None:
    session, create, send = upsert
    send([(b"a", BAD), (b"a", b'{"v":1}'), (b"\xff", b"{}"), (b"\xff", None)])
    create("s", extra="WITH (REDIRECT ERRORS = dlq)")
    assert session.execute("SELECT key, data FROM s").rows == [("a", '{"v":1}')]
    assert session.execute('SELECT error_code, "offset" FROM dlq ORDER BY 2').rows == [
        ("22000", 0),
        ("22000", 2),
    ]


# The upsert state equals a dictionary replaying the messages in offset order.
KEYS = st.sampled_from([b"a", b"b", b"\xff", None])
VALUES = st.sampled_from([b'{"v":1}', b'{"v":2}', BAD, None])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=25))
def test_snapshot_equals_replaying_the_log(spark, messages) -> None:
    state: dict = {}
    for offset, (key, value) in enumerate(messages):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = (value, offset)
    rows = {k.decode(): (json.dumps(json.loads(v), separators=(",", ":")), o)
            for k, (v, o) in state.items() if k not in (None, b"\xff") and v != BAD}
    errors = sum(1 for k, (v, _) in state.items() if k in (None, b"\xff") or v == BAD)
    with EmbeddedKafka() as cluster, sluice.Session() as session:
        cluster.create_topic("r", 1)
        produce(cluster.bootstrap, "r", messages, partition=0)
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{cluster.bootstrap}')")
        session.execute(
            "CREATE SOURCE r FROM KAFKA CONNECTION k (TOPIC 'r') KEY FORMAT TEXT VALUE FORMAT JSON "
            "INCLUDE OFFSET ENVELOPE UPSERT"
        )
        got = session.execute('SELECT key, data, "offset" FROM IGNORE ERRORS r').rows
        assert {k: (d, o) for k, d, o in got} == rows
        assert len(session.execute("SELECT * FROM ONLY ERRORS r").rows) == errors


ROW = {"type": "record", "name": "row", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}]}
DEBEZIUM = {"type": "record", "name": "envelope", "fields": [
    {"name": "before", "type": ["null", ROW]}, {"name": "after", "type": ["null", "row"]},
    {"name": "op", "type": "string"}]}


def debezium(before, after, op: str) -> bytes:
    import io

    import fastavro

    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(DEBEZIUM),
                               {"before": before, "after": after, "op": op})
    return body.getvalue()


def test_debezium_upserts_the_after_row_keyed_by_the_kafka_key(spark, kafka) -> None:
    kafka.create_topic("dbz", 1)
    produce(kafka.bootstrap, "dbz", [
        (b"1", debezium(None, {"id": 1, "name": "ada"}, "c")),
        (b"2", debezium(None, {"id": 2, "name": "bob"}, "c")),
        (b"1", debezium({"id": 1, "name": "ada"}, {"id": 1, "name": "ada l."}, "u")),
        (b"2", debezium({"id": 2, "name": "bob"}, None, "d")),  # after NULL deletes
        (b"3", debezium(None, {"id": 3, "name": None}, "c")),
        (b"3", None),  # so does a tombstone
        (b"1", debezium({"id": 1, "name": "ada"}, {"id": 1, "name": "ada l."}, "u")),  # repeat
    ], partition=0)
    schema = json.dumps(DEBEZIUM).replace("'", "''")
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            "CREATE SOURCE dbz FROM KAFKA CONNECTION kafka (TOPIC 'dbz') KEY FORMAT TEXT VALUE FORMAT "
            f"AVRO USING SCHEMA '{schema}' (CONFLUENT WIRE FORMAT = false) ENVELOPE DEBEZIUM"
        )
        assert session.execute("SELECT id, name FROM dbz").rows == [(1, "ada l.")]
        # The same through the stream: Avro records pass through the upsert state its commits keep.
        session.execute("CREATE MATERIALIZED VIEW m AS SELECT id, name FROM dbz")
        assert session.execute("SELECT id, name FROM m").rows == [(1, "ada l.")]


def test_debezium_decodes_an_avro_key_for_its_errors(spark, kafka) -> None:
    # Regression: a DEBEZIUM source has no key column, but its key is still decoded — its
    # errors name the key — so a non-TEXT key format must not crash the query.
    import io
    import struct

    import fastavro

    key_schema = {"type": "record", "name": "k", "fields": [{"name": "id", "type": "long"}]}

    def key(i: int) -> bytes:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, fastavro.parse_schema(key_schema), {"id": i})
        return b"\x00" + struct.pack(">I", 2) + body.getvalue()

    kafka.create_topic("dbz_avro_key", 1)
    produce(kafka.bootstrap, "dbz_avro_key", [
        (key(1), debezium(None, {"id": 1, "name": "ada"}, "c")),
        (key(2), debezium(None, {"id": 2, "name": "bob"}, "c")),
        (key(2), b"\x00"),  # before: null, then nothing
    ], partition=0)
    value = json.dumps(DEBEZIUM).replace("'", "''")
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            "CREATE SOURCE dbz FROM KAFKA CONNECTION kafka (TOPIC 'dbz_avro_key') "
            f"KEY FORMAT AVRO USING SCHEMA '{json.dumps(key_schema)}' "
            f"VALUE FORMAT AVRO USING SCHEMA '{value}' (CONFLUENT WIRE FORMAT = false) "
            "ENVELOPE DEBEZIUM"
        )
        assert session.execute("SELECT id, name FROM IGNORE ERRORS dbz").rows == [(1, "ada")]
        with pytest.raises(sluice.SqlError) as info:
            session.execute("SELECT id FROM dbz")
        assert info.value.message.startswith(
            "Envelope error: Upsert: Value error: avro deserialization error: unexpected end of datum"
        )
        assert info.value.message.endswith("decoded key: Row{[String(\"2\")]}")
