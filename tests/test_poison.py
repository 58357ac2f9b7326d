"""Poison messages through real sources — Spark, the embedded broker, a loopback schema
registry — for every format × envelope, keys too: the snapshot SELECT fails only with one
of the source's own errors, `FROM ONLY ERRORS` answers, every message is a row, an error or a
documented skip, and a continuously ingested twin with a dead-letter table never dies (see
tests/support/poison.py for what is checked).

The catalogue of kinds that broke a source before is run whole; hypothesis then makes
batches of its own (`SLUICE_POISON_EXAMPLES`, default 3: each example is a topic and two
sources, about ten seconds).
"""

from __future__ import annotations

import itertools
import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.avro_decode import AvroDecoder
from sluice.kafka.embedded import EmbeddedKafka
from sluice.kafka.json_decode import JsonDecoder
from tests.support import poison
from tests.support.registry import Registry
from tests.test_decode import avro_bodies, clock_bodies, csv_payloads, json_payloads, registry_payloads

# The ids tests.support.registry.Registry gives the subjects: their order, from 1.
IDS = {name: number for number, name in enumerate(poison.REGISTRY_SUBJECTS, 1)}
KINDS = poison.kinds(IDS)
GROUPS = sorted({kind.group for kind in KINDS}, key=str)
topics = (f"p{n}" for n in itertools.count())


@pytest.fixture(scope="module")
def world(spark):
    registry = Registry(poison.REGISTRY_SUBJECTS)
    assert {name: registry.subjects[name][0] for name in IDS} == IDS
    try:
        with EmbeddedKafka() as kafka, sluice.Session() as session:
            session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
            session.execute(f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
            yield session, kafka, registry
    finally:
        registry.close()


def test_no_catalogued_poison_breaks_a_source(world) -> None:
    session, kafka, registry = world
    assert poison.broken(session, kafka, registry, KINDS) == {}


def payloads_for(clause: str) -> st.SearchStrategy[bytes]:
    """Hostile payloads for one side's format clause."""
    if "REGISTRY" in clause:
        return registry_payloads(IDS)
    if "AVRO" in clause:
        return avro_bodies
    if "JSON" in clause:
        return json_payloads
    if "CSV" in clause:
        return csv_payloads
    return st.one_of(st.binary(max_size=32), st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80", b"\xc0\x80", b"a\x00"]))


@st.composite
def poison_batches(draw):
    """A group of the catalogue (formats, envelope) and messages (key, value, timestamp) for
    it: some of its catalogued messages, and fresh ones made for its formats."""
    formats, envelope = draw(st.sampled_from(GROUPS))
    key_clause, _, value_clause = formats.partition(" VALUE ")
    values = payloads_for(value_clause or key_clause)
    keys = payloads_for(key_clause) if value_clause else st.just(None)
    known = [m for kind in KINDS if kind.group == (formats, envelope) for m in kind.stamped]
    stamps = st.sampled_from([None, None, 0, 2**62])
    messages = draw(st.lists(st.sampled_from(known), max_size=3)) + draw(
        st.lists(st.tuples(st.none() | keys, st.none() | values, stamps), min_size=1, max_size=6)
    )
    return formats, envelope, draw(st.permutations(messages))


@settings(max_examples=int(os.environ.get("SLUICE_POISON_EXAMPLES", "3")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(poison_batches())
def test_poison_batches_break_no_source(world, batch) -> None:
    session, kafka, registry = world
    formats, envelope, messages = batch
    assert poison.problems(session, kafka, registry, next(topics), formats, envelope, messages) == []


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(json_payloads, min_size=20, max_size=80), st.lists(avro_bodies, min_size=20, max_size=80),
       st.lists(clock_bodies, min_size=5, max_size=20))
def test_what_the_decoders_accept_spark_holds(spark, texts, bodies, clocks) -> None:
    """The differential property behind the decoders' limits: Spark's `parse_json` takes every
    text the JSON decoder accepts, and every Avro column the decoder builds comes back
    through Spark to Python (dates and timestamps in years 1–9999, TIME, decimals)."""
    from pyspark.sql import functions as F

    data, _ = JsonDecoder().columns(texts, list(range(len(texts))))
    accepted = [(text,) for text in data.to_pylist() if text is not None]
    if accepted:
        spark.createDataFrame(accepted, "t string").select(F.to_json(F.parse_json("t"))).collect()
    for schema, payloads in ((poison.AVRO_SCHEMA, bodies), (poison.AVRO_CLOCK, clocks)):
        decoder = AvroDecoder(json.dumps(schema), confluent_wire_format=False)
        data, _ = decoder.columns(payloads, list(range(len(payloads))))
        rows = spark.createDataFrame(pa.table({"datum": data})).collect()
        assert [row.datum is None for row in rows] == [datum is None for datum in data.to_pylist()]


def test_good_messages_read_back_as_written(world) -> None:
    """Every format the catalogue covers, keys too: the values a good message was written
    with (by sluice.kafka.encode) are the values its source returns."""
    session, kafka, registry = world
    assert poison.round_trip_problems(session, kafka, registry, poison.goods(IDS)) == {}
