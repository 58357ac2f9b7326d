"""The format registry (`catalog/formats.py`): encoders round-trip through the decoders —
the reader's own (no Spark) and, for every format a sink can write, a real source on Spark
reading what the encoder produced to the embedded broker —; a sink's format is checked
against its columns; catalogs written by version 1 (flat format descriptions, a sink's
formats as SQL text) open with the same meaning or are refused, untouched."""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import typing
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog import types as t
from sluice.catalog.avro import avro_columns, schema_of
from sluice.catalog.formats import FORMATS, AvroRegistry, Bytes, Json, Text, format_of
from sluice.catalog.store import FILE_NAME, VERSION
from sluice.catalog.types import Column, SqlType, list_of, record
from sluice.errors import CatalogCorrupt
from sluice.kafka.avro_decode import AvroDecoder
from sluice.kafka.embedded import produce
from sluice.kafka.json_decode import JsonDecoder
from sluice.syntax import ast
from tests.support.registry import Registry

CATALOGS = Path(__file__).parent / "catalogs"
UTC = datetime.timezone.utc

# --- without Spark: encoders against the reader's decoders -------------------------------

SCALARS = {
    t.BOOLEAN: st.booleans(),
    t.INTEGER: st.integers(-(2**31), 2**31 - 1),
    t.BIGINT: st.integers(-(2**63), 2**63 - 1),
    t.REAL: st.floats(width=32, allow_nan=False, allow_infinity=False),
    t.DOUBLE: st.floats(allow_nan=False, allow_infinity=False),
    t.BYTEA: st.binary(max_size=8),
    t.TEXT: st.text(max_size=8),
    t.DATE: st.dates(),
    t.TIME: st.times(),
    t.TIMESTAMP: st.datetimes(),
    t.UUID: st.uuids().map(str),
}
names = st.text("abcdefgh_", min_size=1, max_size=4).filter(lambda n: not n[0] == "_")


def columns_of(types: st.SearchStrategy[SqlType]) -> st.SearchStrategy[tuple[Column, ...]]:
    return st.lists(st.tuples(names, types, st.booleans()), min_size=1, max_size=4, unique_by=lambda c: c[0]).map(
        lambda cs: tuple(Column(*c) for c in cs)
    )


sql_types = st.recursive(
    st.sampled_from(list(SCALARS)),
    lambda inner: st.one_of(inner.map(list_of), columns_of(inner).map(lambda cs: record(*cs))),
    max_leaves=4,
)


def values_of(sql_type: SqlType, nullable: bool) -> st.SearchStrategy:
    if sql_type.name == "record":
        value = st.tuples(*(values_of(c.type, c.nullable) for c in sql_type.fields))
    elif sql_type.name == "list":
        value = st.lists(values_of(sql_type.element, True), max_size=3)
    else:
        value = SCALARS[sql_type]
    return st.none() | value if nullable else value


@st.composite
def rows(draw) -> tuple[tuple[Column, ...], tuple]:
    columns = draw(columns_of(sql_types))
    return columns, draw(st.tuples(*(values_of(c.type, c.nullable) for c in columns)))


def as_decoded(sql_type: SqlType, value):
    """`value` as the Avro decoder's Arrow column hands it back."""
    if value is None:
        return None
    if sql_type.name == "record":
        return {f.name: as_decoded(f.type, v) for f, v in zip(sql_type.fields, value, strict=True)}
    if sql_type.name == "list":
        return [as_decoded(sql_type.element, v) for v in value]
    if sql_type == t.TIMESTAMP:
        return value.replace(tzinfo=UTC)
    return value


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows())
def test_avro_rows_round_trip_through_the_readers_decoder(row) -> None:
    columns, values = row
    fmt = AvroRegistry.for_sink(columns, None, "u1")
    # The schema a sink writes reads back as the sink's columns.
    assert avro_columns(fmt.schema, None) == (columns, True)
    payload = AvroRegistry(columns, True, fmt.schema, "u1", schema_id=7).encode(values)
    assert payload[:5] == b"\x00\x00\x00\x00\x07"
    data, errors = AvroDecoder(fmt.schema, True).columns([payload], [0])
    assert errors.to_pylist() == [None]
    assert data.to_pylist() == [{c.name: as_decoded(c.type, v) for c, v in zip(columns, values, strict=True)}]


JSON_SCALARS = {t.BOOLEAN, t.INTEGER, t.BIGINT, t.DOUBLE, t.TEXT}


@settings(max_examples=100, deadline=None)
@given(columns_of(st.sampled_from(sorted(JSON_SCALARS, key=lambda sql_type: sql_type.name))).flatmap(
    lambda cs: st.tuples(st.just(cs), st.tuples(*(values_of(c.type, c.nullable) for c in cs)))))
def test_json_rows_round_trip_through_the_readers_decoder(row) -> None:
    columns, values = row
    payload = Json.for_sink(columns, None, None).encode(values)
    data, errors = JsonDecoder().columns([payload], [0])
    # jsonb numbers are numeric (as in Materialize): a double beyond numeric's range
    # (1e-39 ≤ |x| < 1e39) does not read back.
    doubles = [Decimal(repr(v)) for v in values if isinstance(v, float)]
    if not all(d.is_zero() or -39 <= d.adjusted() < 39 for d in doubles):
        assert "is out of range for type numeric" in errors.to_pylist()[0]
        return
    assert errors.to_pylist() == [None]
    assert json.loads(data.to_pylist()[0]) == {c.name: v for c, v in zip(columns, values, strict=True)}


def test_json_writes_what_json_has_no_type_for_as_postgresql_text() -> None:
    types = {"n": t.NUMERIC, "b": t.BYTEA, "at": t.TIMESTAMP, "d": t.DOUBLE, "doc": t.JSONB,
             "r": record(Column("x", t.REAL, True), Column("t", t.TIME, True)), "l": list_of(t.DATE)}
    columns = tuple(Column(name, sql_type, name == "r") for name, sql_type in types.items())
    values = (
        Decimal("12.50"),
        b"\x00\xff",
        datetime.datetime(2024, 1, 2, 3, 4, 5, 600000),
        float("inf"),
        '{"a": [1, null]}',
        (None, datetime.time(1, 2, 3)),
        [datetime.date(2024, 2, 29), None],
    )
    payload = Json.for_sink(columns, None, None).encode(values)
    assert payload == (
        b'{"n":"12.5","b":"\\\\x00ff","at":"2024-01-02 03:04:05.6","d":"Infinity",'
        b'"doc":{"a":[1,null]},"r":{"x":null,"t":"01:02:03"},"l":["2024-02-29",null]}'
    )


def test_text_and_bytes_write_one_column() -> None:
    assert Text.for_sink((Column("n", t.INTEGER, True),), None, None).encode((42,)) == b"42"
    assert Text((Column("t", t.TEXT, True),)).encode((None,)) is None
    assert Bytes.for_sink((Column("b", t.BYTEA, False),), None, None).encode((bytearray(b"\x01"),)) == b"\x01"


def test_every_format_of_the_grammar_is_one_registry_class() -> None:
    written = ["TEXT", "BYTES", "JSON", "CSV WITH 2 COLUMNS", "AVRO USING SCHEMA '\"int\"'",
               "AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr"]
    nodes = [sluice.parse_one(f"CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT {f}").format.format
             for f in written]
    assert {type(node).__name__ for node in nodes} == {cls.__name__ for cls in typing.get_args(ast.Format)}
    assert [format_of(node) for node in nodes] == list(FORMATS)


# --- sinks' formats against their columns -----------------------------------------------

SINK_SETUP = """
CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:1');
CREATE TABLE t (id bigint, name text, raw bytea);
"""


@pytest.mark.parametrize(
    ("sink", "code", "message"),
    [
        ("KEY (id) NOT ENFORCED FORMAT CSV WITH 3 COLUMNS ENVELOPE UPSERT", "0A000", "FORMAT CSV is not supported for sinks"),
        ("FORMAT AVRO USING SCHEMA '\"string\"' ENVELOPE DEBEZIUM", "0A000",
         "FORMAT AVRO USING SCHEMA is not supported for sinks"),
        ("FORMAT TEXT ENVELOPE DEBEZIUM", "0A000", "FORMAT TEXT requires a single column, found 3"),
        ("KEY (id) NOT ENFORCED KEY FORMAT BYTES VALUE FORMAT JSON ENVELOPE UPSERT", "22023",
         'FORMAT BYTES requires a column of type bytea, found "id" bigint'),
    ],
)
def test_a_sink_format_that_cannot_write_its_columns_is_refused(tmp_path, sink, code, message) -> None:
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute_script(SINK_SETUP)
        with pytest.raises(sluice.SqlError) as info:
            session.execute(f"CREATE SINK k FROM t INTO KAFKA CONNECTION kafka (TOPIC 'o') {sink}")
    assert (info.value.code, info.value.message) == (code, message)
    assert info.value.span is not None


def test_a_sinks_formats_describe_its_key_and_its_rows(tmp_path) -> None:
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute_script(SINK_SETUP + """
            CREATE SINK k FROM t INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (raw) NOT ENFORCED
              KEY FORMAT BYTES VALUE FORMAT JSON ENVELOPE UPSERT""")
        desc = session.catalog.current.get("k").details
    assert desc.key_format == Bytes((Column("raw", t.BYTEA, True),))
    assert desc.value_format == Json(session.catalog.current.get("t").columns)


# --- catalogs written by version 1 ------------------------------------------------------

# The registry subjects `catalogs/version_1.sql` read when sluice f63c973 (catalog version
# 1) made `catalogs/version_1.json` from it.
V1_SUBJECTS = {
    "csr_t-value": {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}]},
    "dbz_t-key": {"type": "record", "name": "k", "fields": [{"name": "id", "type": "long"}]},
    "dbz_t-value": {"type": "record", "name": "envelope", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "row", "fields": [
            {"name": "id", "type": "long"}]}]},
        {"name": "after", "type": ["null", "row"]}]},
}


def test_a_version_1_catalog_opens_with_the_same_meaning(tmp_path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    shutil.copy(CATALOGS / "version_1.json", old / FILE_NAME)
    registry = Registry(V1_SUBJECTS)
    try:
        with sluice.Session(new, check_kafka=False) as made:
            script = (CATALOGS / "version_1.sql").read_text().replace("REGURL", registry.url)
            made.execute_script(script)
            expected = {i.name: i for i in made.catalog.current}
    finally:
        registry.close()
    with sluice.Session(old, check_kafka=False) as opened:
        found = {i.name: i for i in opened.catalog.current}
        assert sorted(found) == sorted(expected)
        # A catalog keeps the columns it stored: s_avro1's was named `value` when it was
        # written; a non-record Avro schema's column is now `?column?`, as in Materialize.
        assert [c.name for c in found["s_avro1"].columns] == ["value"]
        assert [c.name for c in expected["s_avro1"].columns] == ["?column?"]
        # A sink keeps its definition as written: today an upsert sink over a relation
        # without a known unique key needs KEY … NOT ENFORCED, which the script says.
        for name, item in found.items():
            if item.kind != "connection" and name != "s_avro1":
                written = expected[name].create_sql
                assert item.create_sql == written.replace(" NOT ENFORCED", ""), name
                assert dataclasses.replace(item, create_sql=written) == expected[name], name
        # Written again, it is a catalog of this version.
        opened.execute("CREATE TABLE later (x int)")
    assert json.loads((old / FILE_NAME).read_text())["version"] == VERSION


def test_a_version_1_sink_no_format_could_write_is_refused_untouched(tmp_path) -> None:
    content = (CATALOGS / "version_1_csv_sink.json").read_bytes()
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(CatalogCorrupt) as info:
        sluice.Session(tmp_path, check_kafka=False)
    assert info.value.code == "XX001"
    assert "was written by an earlier sluice and cannot be read with the same meaning: " in info.value.message
    assert info.value.message.endswith("FORMAT CSV WITH 2 COLUMNS is not supported for sinks")
    assert (tmp_path / FILE_NAME).read_bytes() == content


# --- on Spark: what a sink's format writes, a source in that format reads ----------------

ROW_COLUMNS = tuple(Column(name, sql_type, name not in ("id", "ok")) for name, sql_type in [
    ("id", t.BIGINT), ("name", t.TEXT), ("score", t.DOUBLE), ("ok", t.BOOLEAN), ("day", t.DATE), ("at", t.TIMESTAMP)])
ROWS = [
    (1, "ünï", 2.5, True, datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5, 6)),
    (2, None, None, False, None, None),
]


def test_what_an_encoder_writes_a_source_reads(spark, kafka) -> None:
    registry = Registry({"avro-value": schema_of(ROW_COLUMNS)})
    avro = AvroRegistry.for_sink(ROW_COLUMNS, None, "u2")
    written = {
        "text": (Text.for_sink(ROW_COLUMNS[1:2], None, None), [("ünï",), ("",)]),
        "bytes": (Bytes.for_sink((Column("b", t.BYTEA, False),), None, None), [(b"\x00\xff",), (b"",)]),
        "json": (Json.for_sink(ROW_COLUMNS, None, None), ROWS),
        "avro": (AvroRegistry(ROW_COLUMNS, True, avro.schema, "u2", schema_id=1), ROWS),
    }
    try:
        with sluice.Session() as session:
            session.execute_script(f"""
                CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
                CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')""")
            for topic, (fmt, values) in written.items():
                kafka.create_topic(topic, 1)
                produce(kafka.bootstrap, topic, [(None, fmt.encode(v)) for v in values])
            session.execute_script("""
                CREATE SOURCE text FROM KAFKA CONNECTION kafka (TOPIC 'text') FORMAT TEXT;
                CREATE SOURCE bytes FROM KAFKA CONNECTION kafka (TOPIC 'bytes') FORMAT BYTES;
                CREATE SOURCE json FROM KAFKA CONNECTION kafka (TOPIC 'json') FORMAT JSON;
                CREATE SOURCE avro FROM KAFKA CONNECTION kafka (TOPIC 'avro')
                  FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr""")
            assert session.execute("SELECT text FROM text").rows == [("ünï",), ("",)]
            assert [tuple(map(bytes, r)) for r in session.execute("SELECT data FROM bytes").rows] == [
                (b"\x00\xff",), (b"",)]
            assert [json.loads(r[0]) for r in session.execute("SELECT data FROM json").rows] == [
                {"id": 1, "name": "ünï", "score": 2.5, "ok": True, "day": "2024-02-29",
                 "at": "2024-01-02 03:04:05.000006"},
                {"id": 2, "name": None, "score": None, "ok": False, "day": None, "at": None},
            ]
            assert session.execute("SELECT * FROM avro ORDER BY id").rows == ROWS
    finally:
        registry.close()
