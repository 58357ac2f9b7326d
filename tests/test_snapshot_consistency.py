"""One snapshot query reads one set of offsets per source, whatever the timing (issue 14,
part 7).

A producer thread keeps updating every key of an ENVELOPE UPSERT topic while queries run,
and a pause injected between the query's reads of the source's store (until another
micro-batch has committed) or between its two references to the source lets the source
move on in between. A query must still see each key once: all its reads of a source — rows, retractions, errors, dead letters — come
from the same committed batches (from the same offset ranges, for a source read from
Kafka). On main the reads listed the store's batches one by one, and such a query
returned keys twice.
"""

from __future__ import annotations

import pytest

import sluice
from sluice.kafka.embedded import produce
from sluice.render import query as query_module
from sluice.storage.store import Store
from tests.support.moving_topic import KEYS, Producer, paused, until_a_commit

QUERIES = 2


@pytest.fixture
def session(spark, kafka):
    kafka.create_topic("moving", 1)
    produce(kafka.bootstrap, "moving", [(k.encode(), b"v0") for k in KEYS])
    with sluice.Session() as s:
        s.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        yield s


def _assert_each_key_once(session, sql: str) -> None:
    for _ in range(QUERIES):
        keys = [row[0] for row in session.execute(sql).rows]
        assert sorted(keys) == KEYS, f"{len(keys)} rows for {len(set(keys))} keys"


def test_a_continuously_ingested_upsert_source_is_read_from_one_set_of_batches(
    session, kafka, monkeypatch
) -> None:
    session.execute(
        "CREATE SOURCE u FROM KAFKA CONNECTION kafka (TOPIC 'moving') "
        "KEY FORMAT TEXT VALUE FORMAT TEXT ENVELOPE UPSERT WITH (REDIRECT ERRORS = u_dlq)"
    )
    assert sorted(r[0] for r in session.execute("SELECT key FROM u").rows) == KEYS  # ingesting
    monkeypatch.setattr(Store, "frame", until_a_commit(Store.frame))
    with Producer(kafka.bootstrap, "moving") as producer:
        _assert_each_key_once(session, "SELECT key FROM u")
    assert producer.rounds > 1


def test_two_references_to_a_source_read_from_kafka_see_the_same_offsets(
    session, kafka, monkeypatch
) -> None:
    session.execute(
        "CREATE SOURCE u FROM KAFKA CONNECTION kafka (TOPIC 'moving') "
        "KEY FORMAT TEXT VALUE FORMAT TEXT ENVELOPE UPSERT"
    )
    monkeypatch.setattr(query_module.QueryRenderer, "relation", paused(query_module.QueryRenderer.relation))
    with Producer(kafka.bootstrap, "moving") as producer:
        # Each key's latest value on both sides: one row per key only if both sides read
        # the topic up to the same offsets.
        _assert_each_key_once(session, "SELECT a.key FROM u AS a JOIN u AS b ON a.key = b.key AND a.text = b.text")
    assert producer.rounds > 1
