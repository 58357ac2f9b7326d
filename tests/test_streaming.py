"""Continuous ingestion on the embedded broker and Spark: a materialized view over an
UPSERT source, the batch SELECT and the reference model agree; dead-letter rows carry
their micro-batch's ingestion time; SUBSCRIBE streams changes; SHOW SOURCE STATISTICS, which
neither waits nor starts a stream."""

from __future__ import annotations

import json
import os
import time
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.embedded import EmbeddedKafka
from tests.support.keyed_topic import KEYS, VALUES, send
from tests.support.upsert_model import Message, upsert


def source_sql(inline: bool) -> str:
    errors = "(VALUE DECODING ERRORS = INLINE)" if inline else ""
    return (
        "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT "
        f"VALUE FORMAT JSON ENVELOPE UPSERT {errors}"
    )


def shown(session: sluice.Session, relation: str, inline: bool) -> set:
    columns = "key, error, data" if inline else "key, data"
    rows = session.execute(f"SELECT {columns} FROM {relation}").rows
    if inline:
        return {(k, None if e is None else e.description, d) for k, e, d in rows}
    return set(rows)


def observed(session: sluice.Session, inline: bool) -> tuple[set, set]:
    rows = shown(session, "IGNORE ERRORS s", inline)
    errors = {m for (m,) in session.execute("SELECT message FROM ONLY ERRORS s").rows}
    return rows, errors


pairs = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), min_size=1, max_size=10)


# Each example runs two sessions and a stream (seconds each): few examples, no shrinking.
@settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    backlog=st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=10),
    first=pairs,
    second=pairs,
    inline=st.booleans(),
    bound=st.sampled_from(["0", "3"]),
)
def test_materialized_view_batch_select_and_model_agree(spark, backlog, first, second, inline, bound) -> None:
    """`backlog`: messages produced before the view, which its ingestion commits with
    batch jobs before its stream starts; `bound`: messages a micro-batch (or such a batch
    job) reads at most (0: no bound), so that a round's messages, and one key's, may be
    spread over several of them."""
    bounded = mock.patch.dict(os.environ, {"SLUICE_MAX_BATCH_MESSAGES": bound})
    with bounded, EmbeddedKafka() as kafka, sluice.Session() as live, sluice.Session() as batch:
        kafka.create_topic("t", 2)
        for session in (live, batch):
            session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
            session.execute(source_sql(inline))
        sent: list[Message] = send(kafka.bootstrap, "t", backlog)
        live.execute(f"CREATE MATERIALIZED VIEW mv AS SELECT {'key, error, data' if inline else 'key, data'} FROM s")
        for round_pairs in (first, second):  # the second round updates the stream's state
            sent += send(kafka.bootstrap, "t", round_pairs)
            expected = upsert(sent, inline=inline)
            assert observed(live, inline) == expected
            assert observed(batch, inline) == expected
            # Every message is counted once, however its read task reduced it.
            (statistics,) = live.execute("SHOW SOURCE STATISTICS FOR s").rows
            assert statistics[1] == len(sent)
            rows, errors = expected
            if errors:
                with pytest.raises(sluice.SqlError) as info:
                    live.execute("SELECT * FROM mv")
                assert info.value.message in errors
            else:
                assert shown(live, "mv", inline) == rows


def test_a_backlog_is_committed_by_bounded_batch_jobs_and_the_stream_goes_on_from_it(spark) -> None:
    bounded = mock.patch.dict(os.environ, {"SLUICE_MAX_BATCH_MESSAGES": "3", "SLUICE_COMPACT_AFTER": "0"})
    with bounded, EmbeddedKafka() as kafka, sluice.Session() as session:
        kafka.create_topic("t", 2)
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(source_sql(False))
        sent = send(kafka.bootstrap, "t", [(b"a", b'{"v":1}'), (b"b", b"{bad"), (b"c", b'{"v":3}'), (b"a", None)] * 2)
        session.execute("CREATE MATERIALIZED VIEW mv AS SELECT key, data FROM s")
        sent += send(kafka.bootstrap, "t", [(b"d", b'{"v":4}'), (b"e", b'{"v":5}')])
        assert set(session.execute("SELECT key, data FROM IGNORE ERRORS s").rows) == upsert(sent, inline=False)[0]
        records = [json.loads(p.read_text()) for p in (session.data_dir / "streams").glob("*/commits/*.json")]
        records.sort(key=lambda r: r["commit"])
        read = [sum(to - start for start, to in r["offsets"].values()) for r in records]
        # Eight messages, four per partition, before the view: batch jobs reading each partition's share of
        # three, rounded up (as a micro-batch's admission does); then the stream's micro-batches.
        assert [r["batch"] for r in records[:2]] == [None, None] and read[:2] == [4, 4]
        assert all(r["batch"] is not None for r in records[2:]) and sum(read[2:]) == 2


@pytest.fixture
def session(spark, kafka):
    kafka.create_topic("t", 2)
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        yield session, kafka


def test_dead_letter_rows_carry_the_ingestion_time_of_their_batch(session) -> None:
    session, kafka = session
    send(kafka.bootstrap, "t", [(b"a", b'{"v":1}'), (b"b", b"{bad")])
    session.execute(
        "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT JSON "
        "INCLUDE KEY, PARTITION, OFFSET WITH (REDIRECT ERRORS = dlq)"
    )
    assert session.execute("SELECT key FROM s").rows == [("a",)]
    send(kafka.bootstrap, "t", [(b"c", b"{bad"), (b"d", b'{"v":4}')])
    keys = sorted(session.execute("SELECT key FROM s").rows)
    assert keys == [("a",), ("d",)]
    dead = session.execute('SELECT mz_timestamp, key, "partition", "offset" FROM dlq ORDER BY mz_timestamp').rows
    assert [(k, p, o) for _, k, p, o in dead] == [(b"b", 1, 0), (b"c", 1, 1)]
    commits = [json.loads(p.read_text()) for p in sorted((session.data_dir / "streams").glob("*/commits/*.json"))]
    stamps = {c["ingested_ms"] for c in commits}
    assert {t for t, *_ in dead} <= stamps and dead[0][0] < dead[1][0]
    statistics = session.execute("SHOW SOURCE STATISTICS FOR s")
    assert statistics.columns == (
        "source", "messages_read", "errors", "dead_lettered", "last_error_at", "status", "reason"
    )
    (name, read, errors, dead_lettered, last_error, status, reason), = statistics.rows
    assert (name, read, errors, dead_lettered, status, reason) == ("s", 4, 2, 2, "running", None)
    assert int(last_error.timestamp() * 1000) == dead[1][0]


def test_subscribe_streams_the_snapshot_then_changes_and_ends_on_an_error(session) -> None:
    session, kafka = session
    send(kafka.bootstrap, "t", [(b"a", b'{"v":1}')])
    session.execute(source_sql(False))
    result = session.execute("SUBSCRIBE (SELECT key, data FROM s)")
    assert result.columns == ("mz_timestamp", "mz_diff", "key", "data")
    assert [row[1:] for row in result.rows] == [(1, "a", '{"v":1}')]
    changes = session.subscribe("SUBSCRIBE (SELECT key, data FROM s)")
    assert next(changes)[1:] == (1, "a", '{"v":1}')
    send(kafka.bootstrap, "t", [(b"a", b'{"v":2}')])
    update = {next(changes)[1:], next(changes)[1:]}
    assert update == {(-1, "a", '{"v":1}'), (1, "a", '{"v":2}')}
    send(kafka.bootstrap, "t", [(b"b", b"{bad")])
    with pytest.raises(sluice.SqlError, match="Envelope error: Upsert: Value error"):
        next(changes)
    changes.close()


def test_statistics_count_every_message_of_every_source(session) -> None:
    session, kafka = session
    send(kafka.bootstrap, "t", [(b"a", b'{"v":1}'), (b"a", b"{bad"), (None, b'{"v":3}'), (b"b", None)])
    session.execute(source_sql(False))
    session.execute(
        "CREATE SOURCE n FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT JSON INCLUDE KEY"
    )
    # Sources only queried are not ingested continuously: nothing counted, nothing started.
    began = time.monotonic()
    assert session.execute("SHOW SOURCE STATISTICS").rows == [
        (name, 0, 0, 0, None, "not ingested", None) for name in ("s", "n")
    ]
    assert time.monotonic() - began < 0.5
    assert not session.controller.running
    assert not (session.data_dir / "streams").exists()
    session.execute("CREATE MATERIALIZED VIEW both_ AS SELECT key FROM s UNION ALL SELECT key FROM n")
    # A read of a continuously ingested source waits for its commits (upsert: `a` ends in
    # an error and `b` is deleted; none: two good values).
    for name, count in (("s", 0), ("n", 2)):
        assert session.execute(f"SELECT count(*) FROM IGNORE ERRORS {name}").rows == [(count,)]
    rows = {r[0]: r[1:4] + r[5:] for r in session.execute("SHOW SOURCE STATISTICS").rows}
    # upsert: a bad value and a NULL key; none: a bad value and a key without value
    assert rows == {"s": (4, 2, 0, "running", None), "n": (4, 2, 0, "running", None)}
