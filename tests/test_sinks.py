"""Kafka sinks on the embedded broker and Spark: tables', views' and upsert sources'
changes delivered as UPSERT and DEBEZIUM messages in JSON and Avro (through the test
registry), stalling on errors, read back with read_committed."""

from __future__ import annotations

import io
import json
import shutil
import struct

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog.formats import Json
from sluice.catalog.types import BIGINT, BOOLEAN, DOUBLE, TEXT, Column
from sluice.kafka.embedded import produce
from sluice.storage.sink.encode import encoded
from tests.support.registry import Registry
from tests.support.sinks import read_committed, upserted

DRAIN_SECONDS = 120


@pytest.fixture
def session(spark, kafka):
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        yield session


def test_table_changes_become_upserts_and_tombstones(session, kafka) -> None:
    session.execute_script(
        """
        CREATE TABLE t (a int, b text);
        INSERT INTO t VALUES (1, 'x'), (2, 'y');
        CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
        """
    )
    session.drain_sinks(DRAIN_SECONDS)
    first = read_committed(kafka.bootstrap, "out")
    assert sorted(first) == [(b'{"a":1}', b'{"a":1,"b":"x"}'), (b'{"a":2}', b'{"a":2,"b":"y"}')]
    session.execute_script("UPDATE t SET b = 'z' WHERE a = 1; DELETE FROM t WHERE a = 2; INSERT INTO t VALUES (3, NULL);")
    session.drain_sinks(DRAIN_SECONDS)
    later = read_committed(kafka.bootstrap, "out")[len(first) :]
    assert sorted(later, key=repr) == sorted(
        [(b'{"a":1}', b'{"a":1,"b":"z"}'), (b'{"a":2}', None), (b'{"a":3}', b'{"a":3,"b":null}')], key=repr
    )


def test_upsert_source_drains_to_its_latest_values(session, kafka) -> None:
    kafka.create_topic("in", 1)
    produce(kafka.bootstrap, "in", [(b"a", b'{"v":1}'), (b"b", b'{"v":2}'), (b"a", b'{"v":3}')])
    session.execute_script(
        """
        CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 'in') KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT;
        CREATE SINK s FROM src INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (key) FORMAT JSON ENVELOPE UPSERT;
        """
    )
    session.drain_sinks(DRAIN_SECONDS)
    assert upserted(read_committed(kafka.bootstrap, "out")) == {
        b'{"key":"a"}': b'{"key":"a","data":{"v":3}}',
        b'{"key":"b"}': b'{"key":"b","data":{"v":2}}',
    }
    produce(kafka.bootstrap, "in", [(b"b", None)])
    session.drain_sinks(DRAIN_SECONDS)
    assert json.loads(upserted(read_committed(kafka.bootstrap, "out"))[b'{"key":"a"}'])["data"] == {"v": 3}
    assert b'{"key":"b"}' not in upserted(read_committed(kafka.bootstrap, "out"))


def _status(session: sluice.Session) -> list[tuple]:
    return [row[3:] for row in session.execute("SHOW SINKS").rows]


def test_corrupt_message_stalls_the_sink_until_its_key_is_overwritten(session, kafka) -> None:
    kafka.create_topic("in", 1)
    produce(kafka.bootstrap, "in", [(b"a", b'{"v":1}')])
    session.execute_script(
        """
        CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 'in') KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT;
        CREATE SINK s FROM src INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (key) FORMAT JSON ENVELOPE UPSERT;
        """
    )
    session.drain_sinks(DRAIN_SECONDS)
    assert _status(session) == [("running", 1, 0, None)]
    produce(kafka.bootstrap, "in", [(b"b", b"{bad"), (b"c", b'{"v":3}')])
    session.drain_sinks(DRAIN_SECONDS)
    (status,) = _status(session)
    assert status[:3] == ("stalled", 1, 0)
    assert status[3].startswith("Envelope error: Upsert: Value error: Failed to decode JSON")
    assert len(read_committed(kafka.bootstrap, "out")) == 1  # nothing past the error, not even c

    produce(kafka.bootstrap, "in", [(b"b", b'{"v":2}')])
    session.drain_sinks(DRAIN_SECONDS)
    assert _status(session)[0][:2] == ("running", 3)
    assert set(upserted(read_committed(kafka.bootstrap, "out"))) == {
        b'{"key":"a"}', b'{"key":"b"}', b'{"key":"c"}'
    }


def test_evaluation_error_in_a_view_stalls_until_its_row_is_deleted(session, kafka) -> None:
    session.execute_script(
        """
        CREATE TABLE t (a int);
        INSERT INTO t VALUES (1), (0);
        CREATE VIEW v AS SELECT a, 10 / a AS q FROM t;
        CREATE SINK s FROM v INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
        """
    )
    session.drain_sinks(DRAIN_SECONDS)
    assert _status(session) == [("stalled", 0, None, "Evaluation error: division by zero")]
    session.execute("DELETE FROM t WHERE a = 0")
    session.drain_sinks(DRAIN_SECONDS)
    assert _status(session) == [("running", 1, 0, None)]
    assert read_committed(kafka.bootstrap, "out") == [(b'{"a":1}', b'{"a":1,"q":10}')]


def test_debezium_json_before_and_after(session, kafka) -> None:
    session.execute_script(
        """
        CREATE TABLE t (a int, b text);
        INSERT INTO t VALUES (1, 'x');
        CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) FORMAT JSON ENVELOPE DEBEZIUM;
        """
    )
    session.drain_sinks(DRAIN_SECONDS)
    session.execute("UPDATE t SET b = 'y'")
    session.drain_sinks(DRAIN_SECONDS)
    session.execute("DELETE FROM t")
    session.drain_sinks(DRAIN_SECONDS)
    assert [(k, json.loads(v)) for k, v in read_committed(kafka.bootstrap, "out")] == [
        (b'{"a":1}', {"before": None, "after": {"a": 1, "b": "x"}}),
        (b'{"a":1}', {"before": {"a": 1, "b": "x"}, "after": {"a": 1, "b": "y"}}),
        (b'{"a":1}', {"before": {"a": 1, "b": "y"}, "after": None}),
    ]


def test_avro_registers_its_schemas_and_frames_with_their_ids(session, kafka) -> None:
    registry = Registry({})
    try:
        session.execute_script(
            f"""
            CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}');
            CREATE TABLE t (a int NOT NULL, b text);
            INSERT INTO t VALUES (1, 'x'), (2, NULL);
            CREATE SINK up FROM t INTO KAFKA CONNECTION kafka (TOPIC 'up') KEY (a) NOT ENFORCED
              FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT;
            CREATE SINK dbz FROM t INTO KAFKA CONNECTION kafka (TOPIC 'dbz')
              FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE DEBEZIUM;
            """
        )
        session.drain_sinks(DRAIN_SECONDS)
        session.execute("DELETE FROM t WHERE a = 2")
        session.drain_sinks(DRAIN_SECONDS)

        def decoded(subject: str, data: bytes | None):
            if data is None:
                return None
            schema_id, schema = registry.subjects[subject]
            assert data[:5] == b"\0" + struct.pack(">I", schema_id)
            return fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(json.loads(schema)))

        up = [(decoded("up-key", k), decoded("up-value", v)) for k, v in read_committed(kafka.bootstrap, "up")]
        assert sorted(up[:2], key=repr) == [({"a": 1}, {"a": 1, "b": "x"}), ({"a": 2}, {"a": 2, "b": None})]
        assert up[2:] == [({"a": 2}, None)]
        dbz = [(k, decoded("dbz-value", v)) for k, v in read_committed(kafka.bootstrap, "dbz")]
        assert sorted(dbz[:2], key=repr) == [
            (None, {"before": None, "after": {"a": 1, "b": "x"}}),
            (None, {"before": None, "after": {"a": 2, "b": None}}),
        ]
        assert dbz[2:] == [(None, {"before": {"a": 2, "b": None}, "after": None})]
    finally:
        registry.close()


def test_consume_stops_at_the_end_of_a_transactional_topic(kafka) -> None:
    from confluent_kafka import Producer

    from sluice.kafka.consume import consume

    kafka.create_topic("tx", 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "test"})
    producer.init_transactions(10)
    for value, commit in ((b"1", True), (b"2", False)):
        producer.begin_transaction()
        producer.produce("tx", key=b"k", value=value)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
    lines = list(consume(kafka.bootstrap, "tx", from_beginning=True, exit_at_end=True))
    assert lines[1:] == ["0\t0\tk\t1\t"]  # the aborted message is not read, and the end is reached


@pytest.mark.parametrize("data_uri", [False, True], ids=["data directory", "data URI"])
def test_a_small_change_to_a_large_relation_brings_only_the_change(spark, kafka, tmp_path, data_uri) -> None:
    # Under a data URI, the step on Spark writes the sink's state through Hadoop's filesystem.
    with sluice.Session(data_uri=f"file://{tmp_path}/data" if data_uri else None) as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        a_small_change_brings_only_the_change(session, kafka)
    if data_uri:
        assert not any((tmp_path / "data").iterdir())  # the temporary session's data went with it


def a_small_change_brings_only_the_change(session, kafka) -> None:
    session.execute_script(
        """
        CREATE TABLE t (a int, b text);
        INSERT INTO t VALUES {rows};
        CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
        """.format(rows=", ".join(f"({a}, 'row {a}')" for a in range(1, 3001)))
    )
    session.drain_sinks(DRAIN_SECONDS)
    (job,) = session.controller.sinks.values()
    assert (job.status.state, job.status.rows, job.status.received) == ("running", 3000, 3000)
    # What each step from here brings to the driver: the sink's own poll may find the
    # change before the step the drain asks for, which then finds nothing.
    received = []
    evaluate = job.evaluate

    def counted(*args):
        changes = evaluate(*args)
        received.append(changes.received)
        return changes

    job.evaluate = counted
    session.execute("UPDATE t SET b = 'changed' WHERE a = 1234")
    session.drain_sinks(DRAIN_SECONDS)
    # The driver received the one changed key, not the 3,000 rows, and wrote one message.
    assert (job.status.state, job.status.rows) == ("running", 3001)
    assert sorted(received)[-1:] == [1] and sum(received) == 1
    messages = read_committed(kafka.bootstrap, "out")
    assert messages[3000:] == [(b'{"a":1234}', b'{"a":1234,"b":"changed"}')]
    assert upserted(messages) == {
        json.dumps({"a": a}).replace(" ", "").encode(): json.dumps({"a": a, "b": "changed" if a == 1234 else f"row {a}"}, separators=(",", ":")).encode()
        for a in range(1, 3001)
    }


ROWS = st.lists(
    st.tuples(
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.text(st.characters(codec="utf-8", max_codepoint=0x10FFFF), max_size=6),
        st.none() | st.booleans(),
        st.none() | st.floats(),
    ),
    min_size=1,
    max_size=200,
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ROWS)
def test_json_made_in_the_jvm_is_the_encoders_bytes(spark, rows) -> None:
    fmt = Json((Column("id", BIGINT, True), Column("t\u00e9\"xt", TEXT, True), Column("b", BOOLEAN, True), Column("d", DOUBLE, True)))
    frame = spark.createDataFrame(rows, "id bigint, `t\u00e9\"xt` string, b boolean, d double")
    got = [bytes(r[0]) for r in frame.select(encoded(fmt, frame, tuple(frame.columns))).collect()]
    assert got == [fmt.encode(row) for row in rows]


def test_a_state_an_older_sluice_kept_in_one_arrow_file_is_read(spark, kafka, tmp_path) -> None:
    """Sinks once kept what they delivered as `state/<version>.arrow`: a sink reopened over
    such a state delivers only what changed since, and keeps its next state as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def opened() -> sluice.Session:
        return sluice.Session(tmp_path)

    with opened() as session:
        session.execute_script(f"""
            CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
            CREATE TABLE t (a int, b text);
            INSERT INTO t VALUES (1, 'x'), (2, 'y');
            CREATE SINK s FROM t INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
        """)
        session.drain_sinks(DRAIN_SECONDS)
    (state,) = (tmp_path / "sinks").glob("*/state")
    (version,) = [p for p in state.iterdir() if p.is_dir()]
    delivered = pa.concat_tables(pq.read_table(f) for f in sorted(version.glob("part-*.parquet")))
    with pa.OSFile(str(state / f"{version.name}.arrow"), "wb") as sink, pa.ipc.new_file(sink, delivered.schema) as writer:
        writer.write_table(delivered)
    shutil.rmtree(version)
    with opened() as session:
        session.execute("UPDATE t SET b = 'z' WHERE a = 1")
        session.drain_sinks(DRAIN_SECONDS)
        (job,) = session.controller.sinks.values()
        assert (job.status.state, job.status.rows) == ("running", 3)
    messages = read_committed(kafka.bootstrap, "out")
    assert messages[2:] == [(b'{"a":1}', b'{"a":1,"b":"z"}')]
    assert not list(state.glob("*.arrow")) and [p.name for p in state.iterdir()] == [str(int(version.name) + 1)]
