"""Kafka sources on Spark: decoders, oks/errs, ENVELOPE NONE, dead-letter tables, snapshot
SELECT — against the embedded broker and a real Spark session."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.client import watermarks
from sluice.kafka.decode import describe_bytes
from sluice.kafka.embedded import EmbeddedKafka, produce
from tests.test_decode import SERDE_ERRORS

AVRO = {"type": "record", "name": "r", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": ["null", "string"]}]}


def avro(datum, schema_id: int | None = 1) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(AVRO), datum)
    header = b"" if schema_id is None else b"\x00" + struct.pack(">I", schema_id)
    return header + body.getvalue()


@pytest.fixture
def session(spark, kafka):
    with sluice.Session() as s:
        s.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        yield s


def source(session, kafka, messages, spec: str, *, name: str = "s", partitions: int = 1,
           partition: int = 0, extra: str = "") -> None:
    kafka.create_topic(name, partitions)
    produce(kafka.bootstrap, name, messages, partition=partition)
    session.execute(f"CREATE SOURCE {name} FROM KAFKA CONNECTION kafka (TOPIC '{name}') {spec} {extra}")


def rows(session, sql: str) -> list:
    return session.execute(sql).rows


def failure(session, sql: str, code: str = "22000") -> str:
    """The message `sql` fails with, checking its SQLSTATE (22000: a decode error)."""
    with pytest.raises(sluice.SqlError) as info:
        session.execute(sql)
    assert info.value.code == code
    return info.value.message


def test_text(session, kafka) -> None:
    source(session, kafka, [(None, b"hello"), (None, b""), (None, b"\xff\xfeok")], "FORMAT TEXT INCLUDE OFFSET")
    assert failure(session, "SELECT * FROM s WHERE false") == (
        'Decode error: Failed to decode UTF-8 (original bytes: "fffe6f6b")'
    )
    assert rows(session, 'SELECT text, "offset" FROM IGNORE ERRORS s ORDER BY 2') == [("hello", 0), ("", 1)]
    assert rows(session, "SELECT * FROM ONLY ERRORS s") == [
        ('Decode error: Failed to decode UTF-8 (original bytes: "fffe6f6b")', "22000")
    ]


def test_bytes_never_fail(session, kafka) -> None:
    source(session, kafka, [(None, b"\xff\x00"), (None, b"")], "FORMAT BYTES")
    assert sorted(rows(session, "SELECT data FROM s")) == [(b"",), (b"\xff\x00",)]


def test_json(session, kafka) -> None:
    source(session, kafka, [(None, b'{"a": [1, null]}'), (None, b"null"), (None, b"1 2"), (None, b"{"),
                            (None, b'"\xff"')],
           "FORMAT JSON INCLUDE OFFSET")
    assert rows(session, 'SELECT data, "offset" FROM IGNORE ERRORS s ORDER BY 2') == [
        ('{"a":[1,null]}', 0),
        ("null", 1),
    ]
    assert rows(session, "SELECT message FROM ONLY ERRORS s ORDER BY message") == [
        ('Decode error: Failed to decode JSON: EOF while parsing an object at line 1 column 1 '
         '(original text: {, original bytes: "7b")',),
        ('Decode error: Failed to decode JSON: invalid unicode code point at line 1 column 3 '
         '(original bytes: "22ff22")',),
        ('Decode error: Failed to decode JSON: trailing characters at line 1 column 3 '
         '(original text: 1 2, original bytes: "312032")',),
    ]


def test_json_errors_are_serde_jsons(session, kafka) -> None:
    """Every kind of JSON error through a real source, in serde_json's words at its line and
    column (the byte where it stopped), as Materialize prints them."""
    source(session, kafka, [(None, payload) for payload, _ in SERDE_ERRORS], "FORMAT JSON")
    expected = sorted(f"Decode error: Failed to decode JSON: {text} {describe_bytes(payload)}" for payload, text in SERDE_ERRORS)
    assert [m for (m,) in rows(session, "SELECT message FROM ONLY ERRORS s ORDER BY message")] == expected


def test_json_numbers_are_refused_by_value_whatever_the_spelling(session, kafka) -> None:
    spellings = ["1000000000000000000000000000000e9", "0.0001e43", "1e39", "1E+0039", "10e38",
                 "100000000000000000000000000000e8", "0.0001e42", "9.99e38", "1e-39", "0e999999999"]
    source(session, kafka, [(None, f"[{n}]".encode()) for n in spellings], "FORMAT JSON INCLUDE OFFSET")
    assert rows(session, 'SELECT data, "offset" FROM IGNORE ERRORS s ORDER BY 2') == [
        ("[1e+37]", 5), ("[1e+38]", 6), ("[9.99e+38]", 7), ("[1e-39]", 8), ("[0.0]", 9)
    ]
    assert sorted(m for (m,) in rows(session, "SELECT message FROM ONLY ERRORS s")) == sorted(
        f'Decode error: Failed to decode JSON: "{n}" is out of range for type numeric {describe_bytes(f"[{n}]".encode())}'
        for n in spellings[:5]
    )


def test_csv_field_far_past_pythons_field_size_limit_is_a_value(session, kafka) -> None:
    """A field of 999,000 bytes (the largest a message of the embedded broker holds, and 7½
    times Python's default CSV field limit) is a value."""
    field = "x" * 999_000
    source(session, kafka, [(None, f'"{field}",y'.encode())], "FORMAT CSV WITH 2 COLUMNS")
    assert rows(session, "SELECT length(column1), column2, column1 = repeat('x', 999000) FROM s") == [
        (999_000, "y", True)
    ]
    assert rows(session, "SELECT * FROM ONLY ERRORS s") == []


def test_csv(session, kafka) -> None:
    source(session, kafka, [(None, b"a,b"), (None, b'"x,y",'), (None, b"a"), (None, b"a,b,c")],
           "FORMAT CSV WITH 2 COLUMNS")
    assert sorted(rows(session, "SELECT * FROM IGNORE ERRORS s")) == [("a", "b"), ("x,y", "")]
    assert sorted(r[0] for r in rows(session, "SELECT message FROM ONLY ERRORS s")) == [
        'Decode error: CSV error at record number 3: expected 2 columns, got 1. '
        '(original text: a, original bytes: "61")',
        'Decode error: CSV error at record number 4: expected 2 columns, got 3. '
        '(original text: a,b,c, original bytes: "612c622c63")',
    ]


def test_avro_inline_schema_with_and_without_the_confluent_header(session, kafka) -> None:
    schema = json.dumps(AVRO).replace("'", "''")
    source(session, kafka, [(None, avro({"a": 1, "b": "x"})), (None, avro({"a": 2, "b": None})),
                            (None, b"\x07" + avro({"a": 3, "b": None})[1:])],
           f"FORMAT AVRO USING SCHEMA '{schema}'")
    assert sorted(rows(session, "SELECT a, b FROM IGNORE ERRORS s")) == [(1, "x"), (2, None)]
    (message,) = rows(session, "SELECT message FROM ONLY ERRORS s")[0]
    assert message.startswith(
        "Decode error: avro deserialization error: wrong Confluent-style avro serialization "
        "magic: expected 0, got 7 (original"
    )
    source(session, kafka, [(None, avro({"a": 5, "b": "y"}, schema_id=None))], name="plain",
           spec=f"FORMAT AVRO USING SCHEMA '{schema}' (CONFLUENT WIRE FORMAT = false)")
    assert rows(session, "SELECT a, b FROM plain") == [(5, "y")]


def test_envelope_none_with_include_key(session, kafka) -> None:
    source(session, kafka, [
        (b"k", b"v"),       # a row
        (None, b"v2"),      # null key: a row with a NULL key
        (b"k", None),       # null value with a key: an envelope error
        (None, None),       # neither: skipped
        (b"\xff", b"v3"),   # a key that does not decode: an error, since the key is included
    ], "KEY FORMAT TEXT VALUE FORMAT TEXT INCLUDE KEY, OFFSET")
    assert sorted(rows(session, 'SELECT key, text, "offset" FROM IGNORE ERRORS s'), key=str) == [
        ("k", "v", 0), (None, "v2", 1),
    ]
    assert sorted(rows(session, 'SELECT message, code FROM ONLY ERRORS s')) == [
        ('Decode error: Failed to decode UTF-8 (original bytes: "ff")', "22000"),
        ("Envelope error: Flat: Value not present for message", "22004"),
    ]


def test_key_errors_do_not_matter_without_include_key(session, kafka) -> None:
    source(session, kafka, [(b"\xff", b"v")], "KEY FORMAT TEXT VALUE FORMAT TEXT")
    assert rows(session, "SELECT * FROM s") == [("v",)]


def test_dead_letter_table_takes_the_errors(session, kafka) -> None:
    source(session, kafka, [(None, b"ok"), (None, b"\xff")], "FORMAT TEXT",
           extra="WITH (REDIRECT ERRORS = dlq)")
    assert rows(session, "SELECT * FROM s") == [("ok",)]
    (row,) = rows(session, 'SELECT error, error_code, partition, "offset", key, value FROM dlq')
    assert row == ('Decode error: Failed to decode UTF-8 (original bytes: "ff")', "22000",
                   0, 1, None, b"\xff")
    assert rows(session, "SELECT count(*) FROM dlq WHERE mz_timestamp > 0") == [(1,)]
    # The errors went to the dead-letter table: the source's own errs stream has none.
    assert rows(session, "SELECT * FROM ONLY ERRORS s") == []


def test_start_offset_and_views(session, kafka) -> None:
    source(session, kafka, [(None, b"\xff"), (None, b"b"), (None, b"c")],
           "FORMAT TEXT INCLUDE OFFSET", name="late")
    session.execute("DROP SOURCE late")
    session.execute(
        "CREATE SOURCE late FROM KAFKA CONNECTION kafka (TOPIC 'late', START OFFSET (1)) FORMAT TEXT INCLUDE OFFSET"
    )
    session.execute("CREATE VIEW v AS SELECT upper(text) AS t FROM late")
    assert sorted(rows(session, "SELECT t FROM v")) == [("B",), ("C",)]


def test_missing_topic_and_unreachable_broker_are_clear_errors(spark) -> None:
    with EmbeddedKafka() as cluster, sluice.Session() as session:
        cluster.create_topic("t", 1)
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{cluster.bootstrap}')")
        with pytest.raises(sluice.SqlError, match="^Topic does not exist$") as info:
            session.execute("CREATE SOURCE gone FROM KAFKA CONNECTION k (TOPIC 'gone') FORMAT TEXT")
        assert info.value.detail.startswith("topic 'gone' is not on connection k")
        session.execute("CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT WITH (RETRY TIMEOUT = '1s')")
        cluster.set_broker_down(1)
        with pytest.raises(sluice.SqlError, match="^Source error: source \"s\" has failed: topic 't'"):
            session.execute("SELECT * FROM s")


# Conservation: every message produced is in exactly one of oks and errs, or is the
# documented skip (no key and no value), with its own partition and offset.
MESSAGES = st.tuples(
    st.sampled_from([None, b"k", b"\xffk"]),
    st.sampled_from([None, b"good", b"\xfe bad", b""]),
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2), MESSAGES), min_size=1, max_size=40))
def test_every_message_lands_exactly_once(spark, placed) -> None:
    with EmbeddedKafka() as cluster, sluice.Session() as session:
        cluster.create_topic("c", 3)
        expected = {}
        for partition in range(3):
            batch = [m for p, m in placed if p == partition]
            produce(cluster.bootstrap, "c", batch, partition=partition)
            for offset, (key, value) in enumerate(batch):
                if key is not None or value is not None:
                    expected[(partition, offset)] = (key, value)
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{cluster.bootstrap}')")
        session.execute(
            "CREATE SOURCE c FROM KAFKA CONNECTION k (TOPIC 'c') KEY FORMAT TEXT VALUE FORMAT TEXT "
            "INCLUDE KEY, PARTITION, OFFSET WITH (REDIRECT ERRORS = dlq)"
        )
        oks = rows(session, 'SELECT partition, "offset" FROM c')
        errs = rows(session, 'SELECT partition, "offset" FROM dlq')
        landed = oks + errs
        assert len(landed) == len(set(landed)) == len(expected)
        assert set(landed) == set(expected)
        for partition, offset in errs:
            key, value = expected[(partition, offset)]
            assert value is None or value.startswith(b"\xfe") or (key or b"").startswith(b"\xff")


def test_start_timestamp_reads_from_the_first_late_enough_message(session, kafka) -> None:
    kafka.create_topic("ts", 2)
    for i, ts in enumerate([1_000, 2_000, 3_000, 4_000]):
        produce(kafka.bootstrap, "ts", [(None, f"p0-{i}".encode())], partition=0, timestamp_ms=ts)
    produce(kafka.bootstrap, "ts", [(None, b"p1-early")], partition=1, timestamp_ms=500)
    session.execute(
        "CREATE SOURCE ts FROM KAFKA CONNECTION kafka (TOPIC 'ts', START TIMESTAMP 2500) FORMAT TEXT"
    )
    assert sorted(rows(session, "SELECT text FROM ts")) == [("p0-2",), ("p0-3",)]


# The embedded broker keeps about 5 MiB per partition: 8 MiB pushes the low mark up.
BURY = [(None, b"x" * 1024) for _ in range(8_000)]


def lost(topic: str, start: int, end: int) -> str:
    return (
        f"Source error: topic '{topic}' partition 0: offsets {start} to {end - 1} were deleted by "
        "retention before they were read"
    )


def test_history_deleted_before_the_source_existed_is_not_lost(session, kafka) -> None:
    source(session, kafka, BURY, "FORMAT BYTES INCLUDE OFFSET", name="old")
    (low, count) = rows(session, 'SELECT min("offset"), count(*) FROM old')[0]
    assert low > 0 and count == 8_000 - low


def test_a_start_offset_retention_deleted_is_an_error(session, kafka) -> None:
    source(session, kafka, BURY, "FORMAT BYTES", name="old")
    session.execute(
        "CREATE SOURCE from_zero FROM KAFKA CONNECTION kafka (TOPIC 'old', START OFFSET (0)) FORMAT BYTES"
    )
    (low,) = rows(session, "SELECT 8000 - count(*) FROM old")[0]
    assert failure(session, "SELECT count(*) FROM from_zero", "58000") == lost("old", 0, low)


@pytest.mark.parametrize("envelope", ["", "ENVELOPE UPSERT"])
def test_offsets_deleted_after_the_source_was_created_are_an_error(session, kafka, envelope) -> None:
    source(session, kafka, [(b"k", b"first")], f"KEY FORMAT TEXT VALUE FORMAT BYTES INCLUDE OFFSET {envelope}",
           name="gone")
    assert rows(session, 'SELECT "offset" FROM gone') == [(0,)]
    produce(kafka.bootstrap, "gone", [(b"k", v) for _, v in BURY], partition=0)
    low, _ = watermarks(kafka.bootstrap, "gone", {})[0]
    assert failure(session, "SELECT count(*) FROM gone", "58000") == lost("gone", 0, low)
    assert rows(session, "SELECT code FROM ONLY ERRORS gone") == [("58000",)]
    assert rows(session, 'SELECT max("offset") FROM IGNORE ERRORS gone') == [(8_000,)]


def test_a_stream_that_falls_behind_retention_reports_the_lost_range(spark, kafka, tmp_path) -> None:
    kafka.create_topic("behind", 1)
    produce(kafka.bootstrap, "behind", [(None, b"a"), (None, b"b")], partition=0)
    with sluice.Session(tmp_path) as first:
        first.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        first.execute(
            "CREATE SOURCE behind FROM KAFKA CONNECTION kafka (TOPIC 'behind') FORMAT BYTES "
            "INCLUDE OFFSET WITH (REDIRECT ERRORS = dlq)"
        )
        assert rows(first, "SELECT count(*) FROM behind") == [(2,)]
    # While nothing ingests, retention deletes offsets the stream has not read yet.
    produce(kafka.bootstrap, "behind", BURY, partition=0)
    low, high = watermarks(kafka.bootstrap, "behind", {})[0]
    assert low > 2
    with sluice.Session(tmp_path) as reopened:
        assert rows(reopened, 'SELECT count(*), min("offset") FROM behind WHERE "offset" >= 2') == [
            (high - low, low)
        ]
        assert rows(reopened, 'SELECT error, error_code, partition, "offset", key, value FROM dlq') == [
            (lost("behind", 2, low), "58000", 0, 2, None, None)
        ]


@pytest.mark.parametrize(
    ("tolerance", "fails"), [("ALL", False), ("2", False), ("1", True), ("NONE", True)]
)
def test_error_tolerance_fails_the_source_past_n_errors(session, kafka, tolerance, fails) -> None:
    source(session, kafka, [(None, b"ok"), (None, b"\xff"), (None, b"\xfe")], "FORMAT TEXT",
           extra=f"WITH (REDIRECT ERRORS = dlq, ERROR TOLERANCE = {tolerance})")
    if not fails:
        assert rows(session, "SELECT * FROM IGNORE ERRORS s") == [("ok",)]
        return
    limit = 0 if tolerance == "NONE" else int(tolerance)
    assert failure(session, "SELECT * FROM IGNORE ERRORS s", "58000") == (
        f'Source error: source "s" has failed: 2 errors seen, more than its ERROR TOLERANCE of {limit}'
    )


def test_avro_through_the_schema_registry_decodes_by_writer_schema_id(session, kafka) -> None:
    from tests.support.registry import Registry

    reader_schema = {"type": "record", "name": "r", "fields": [
        {"name": "a", "type": "long"}, {"name": "c", "type": "string", "default": "none"}]}
    registry = Registry({"reg-value": reader_schema, "old-writer": AVRO})
    try:
        old_id = registry.subjects["old-writer"][0]
        session.execute(f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
        # Written with the older schema (a, b): read with the registered one (a, c).
        source(session, kafka, [(None, avro({"a": 7, "b": "x"}, schema_id=old_id)),
                                (None, avro({"a": 8, "b": None}, schema_id=99))],
               "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr", name="reg")
        assert rows(session, "SELECT a, c FROM IGNORE ERRORS reg") == [(7, "none")]
        (message,) = rows(session, "SELECT message FROM ONLY ERRORS reg")[0]
        assert message.startswith("Decode error: avro deserialization error: ")
        assert "schema id 99 not found" in message
    finally:
        registry.close()
