"""EXPLAIN PYSPARK prints what sluice runs: its program, run in a real Spark session over
the embedded broker, gives the rows and the errors the statement gives; for a source
ingested continuously, the program's own ingestion writes files that read back as the
source's rows, and its reads of the session's committed files give the statement's
result. Printing it starts no Spark and opens no socket (tests/test_planning_isolation.py).
The printed text: tests/golden/plan/explain_pyspark.test."""

from __future__ import annotations

from pathlib import Path

import pytest

import sluice
from sluice.kafka.embedded import produce
from sluice.storage.location import disk, local
from sluice.storage.records import KINDS
from sluice.storage.source import snapshot_read
from sluice.storage.store import Store
from sluice.storage.stored import StoredCollection
from tests.test_ingest import failure, rows


@pytest.fixture
def session(spark, kafka):
    kafka.create_topic("orders", 2)
    produce(kafka.bootstrap, "orders", [(b"alice", b'{"amount": 5}'), (b"bob", b"{oops")], partition=0)
    produce(kafka.bootstrap, "orders", [(b"carol", b'{"amount": 7}'), (b"\xff", b'{"amount": 1}')], partition=1)
    kafka.create_topic("clicks", 1)
    produce(kafka.bootstrap, "clicks", [(None, b"alice"), (None, b"carol"), (None, b"alice"), (None, b"dave")], partition=0)
    kafka.create_topic("updates", 1)
    produce(
        kafka.bootstrap,
        "updates",
        [(b"k1", b'{"v": 1}'), (b"k2", b"{bad"), (b"k1", b'{"v": 2}'), (b"k3", b'{"v": 3}'), (b"k3", None)],
        partition=0,
    )
    with sluice.Session() as s:
        s.execute_script(f"""
            CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
            CREATE SOURCE orders FROM KAFKA CONNECTION kafka (TOPIC 'orders')
              KEY FORMAT TEXT VALUE FORMAT JSON INCLUDE KEY, PARTITION, OFFSET;
            CREATE SOURCE clicks FROM KAFKA CONNECTION kafka (TOPIC 'clicks') FORMAT TEXT;
        """)
        yield s


def program(session, sql: str) -> dict:
    """Runs the program EXPLAIN PYSPARK prints for `sql` on the session's Spark, each
    source reading the offsets a snapshot now would: its variables, and under "raised"
    what it raised."""
    return run(session, explained(session, sql))


def explained(session, sql: str) -> str:
    return "\n".join(row[0] for row in rows(session, f"EXPLAIN PYSPARK FOR {sql}"))


def run(session, text: str, **given) -> dict:
    """Runs `text` with `ranges` as a snapshot now reads them, and the variables `given`."""
    from sluice.spark.session import spark

    catalog = session.catalog.current
    ranges = {}
    for name in ("orders", "clicks", "updates"):
        item = catalog.get(name)
        if item is not None:
            ranges[name] = [list(r) for r in snapshot_read(catalog, item.id).ranges]
    variables = {"spark": spark(), "ranges": ranges, **given}
    try:
        exec(compile(text, "<EXPLAIN PYSPARK>", "exec"), variables)
    except Exception as e:  # what a user running the program sees
        variables["raised"] = e
    return variables


def test_a_source_with_decode_errors(session) -> None:
    sql = "SELECT key, data::text, \"offset\" FROM orders"
    error = failure(session, sql)
    ran = program(session, sql)
    assert str(ran["raised"]) == error
    assert error.startswith("Decode error: Failed to decode JSON")
    # Its rows were the source's oks, as reading around the errors gives them.
    good = rows(session, "SELECT key, data::text, \"offset\" FROM IGNORE ERRORS orders")
    assert sorted(tuple(r[:3]) for r in ran["rows"]) == sorted(good)
    errs = sorted(r.message for r in ran["orders_errs"].collect())
    assert errs == sorted(r[0] for r in rows(session, "SELECT message FROM ONLY ERRORS orders"))
    assert len(errs) == 2


def test_a_view_with_a_join(session) -> None:
    session.execute("""
        CREATE VIEW seen AS SELECT o.key, count(*) AS clicks
        FROM IGNORE ERRORS orders AS o JOIN clicks AS c ON o.key = c.text GROUP BY o.key
    """)
    sql = "SELECT * FROM seen"
    ran = program(session, sql)
    assert "raised" not in ran
    assert sorted(ran["rows"]) == sorted(rows(session, sql)) == [("alice", 2), ("carol", 1)]


def test_an_evaluation_error(session) -> None:
    sql = "SELECT text, 10 / (length(text) - 4) FROM clicks"
    error = failure(session, sql, "22012")
    assert error == "Evaluation error: division by zero"
    assert error in str(program(session, sql)["raised"])
    ok = "SELECT text, 10 / (length(text) - 3) FROM clicks"
    width = 2  # then the flag saying whether the row's evaluation failed
    assert sorted(tuple(r[:width]) for r in program(session, ok)["rows"]) == sorted(rows(session, ok))


def test_a_source_as_created(session) -> None:
    create = """CREATE SOURCE updates FROM KAFKA CONNECTION kafka (TOPIC 'updates')
        KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT"""
    text = explained(session, create)
    assert session.catalog.current.get("updates") is None  # explained, not created
    session.execute(create)
    ran = run(session, text)
    assert "raised" not in ran and "updates_oks = (" in text
    oks = sorted((r.key, r.data.toJson()) for r in ran["updates_oks"].collect())
    assert oks == sorted(rows(session, "SELECT key, data::text FROM IGNORE ERRORS updates")) == [("k1", '{"v":2}')]
    errs = [r.message for r in ran["updates_errs"].collect()]
    assert errs == [r[0] for r in rows(session, "SELECT message FROM ONLY ERRORS updates")]
    assert errs[0].startswith("Envelope error: Upsert: Value error: Failed to decode JSON")


def test_a_materialized_view_over_a_table(session) -> None:
    session.execute_script("""
        CREATE TABLE t (a int, b int);
        INSERT INTO t VALUES (1, 2), (1, 3), (2, 0);
    """)
    create = "CREATE MATERIALIZED VIEW mv AS SELECT a, sum(b) AS total, 6 / max(b) AS q FROM t GROUP BY a"
    text = explained(session, create)
    session.execute(create)
    error = failure(session, "SELECT * FROM mv", "22012")
    assert str(run(session, text)["raised"]) == error == "Evaluation error: division by zero"
    session.execute("UPDATE t SET b = 3 WHERE a = 2")
    ran = program(session, "SELECT * FROM mv")
    width = 3  # then the flag saying whether the row's evaluation failed
    assert sorted(tuple(r[:width]) for r in ran["rows"]) == sorted(rows(session, "SELECT * FROM mv"))
    assert sorted(rows(session, "SELECT * FROM mv")) == [(1, 5, 2), (2, 3, 2)]


def test_a_sink_over_a_view_of_a_table(session) -> None:
    """The printed program's rows are the (identity, payload) pairs the sink's job
    evaluates: its relation's query through the envelope's encoding."""
    from sluice.plan import sink_query
    from sluice.render.executor import run_snapshot
    from sluice.storage.sink.envelopes import envelope_of

    session.execute_script("""
        CREATE TABLE t (id int, name text, doc jsonb);
        INSERT INTO t VALUES (1, 'ann', '{"x": [1, 2]}'), (2, NULL, NULL);
        CREATE VIEW v AS SELECT id, upper(name) AS n, doc FROM t;
    """)
    create = "CREATE SINK o FROM v INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (id) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT"
    text = explained(session, create)
    session.execute(create)
    catalog = session.catalog.current
    sink = catalog.get("o")
    envelope = envelope_of(sink, catalog)
    envelope.prepare()
    evaluated = run_snapshot(sink_query(sink, catalog), catalog, session.tables, {}, lambda f: list(envelope.shape(f)))[1]
    printed = sorted((bytes(key), bytes(value)) for key, value in run(session, text)["rows"])
    assert printed == sorted((bytes(key), bytes(value)) for key, value in evaluated)
    assert printed[0] == (b'{"id":1}', b'{"id":1,"n":"ANN","doc":{"x":[1,2]}}')


def ingested_program(session, sql: str, source: str, *queries: str) -> tuple[str, dict, list]:
    """EXPLAIN PYSPARK's program for `sql`, then `sql` run and `queries`' rows or errors,
    then the program run, its reads of `source`'s committed files given the session's
    (`files`), its backlog what the topic holds from where the source starts (`backlogs`),
    its stream starting where that ends (`starts`)."""
    text = explained(session, sql)
    assert f"def {source}_ingest():" in text and "files[" in text
    session.execute(sql)
    results = []
    for query in queries:
        try:
            results.append(sorted(rows(session, query)))
        except sluice.SqlError as e:
            results.append(e.message)
    item = session.catalog.current.get(source)
    store = Store(local(session.data_dir / "streams" / item.id))
    records = store.inspect().records
    files = {k: [str(disk(store.root) / f["path"]) for r in records for f in r["files"] if f["kind"] == k] for k in KINDS}
    # A store without commits: its backlog is what the topic holds from the source's start, and its stream starts
    # where that ends, which its backlog's commit has committed.
    read = snapshot_read(session.catalog.current, item.id)
    backlogs = {source: [list(r) for r in read.ranges]}
    starts = {source: {str(p): end for p, _, end in read.ranges}}
    given = {"files": {source: files}, "backlogs": backlogs, "starts": starts, "committed": starts}
    return text, run(session, text, **given), results


def ingest(session, ran: dict, source: str, folder: Path) -> None:
    """The program's ingestion of `source` started afresh in `folder` (the session's
    stopped: it holds the query's name), stopped once it has read what the topic holds."""
    item = session.catalog.current.get(source)
    session.controller.running.pop(item.id).stop()
    ran["stores"] = {source: str(folder)}
    ingestion = ran[f"{source}_ingest"]()
    try:
        ingestion.processAllAvailable()
    finally:
        ingestion.stop()


def written_collection(session, ran: dict, source: str, folder: Path):
    """The collection the program's own ingestion wrote, read by the store's reader."""
    schema = ran[f"{source}_files_schema"]
    written = {k: [str(p) for p in folder.glob(f"batch-*/out/__out={k}/*.parquet")] for k in KINDS}
    item = session.catalog.current.get(source)
    return StoredCollection(item, lambda kind: ran["spark"].read.schema(schema).parquet(*written[kind]))


def test_a_materialized_view_over_a_source_with_a_dead_letter_table(session, kafka) -> None:
    kafka.create_topic("names", 1)
    produce(kafka.bootstrap, "names", [(None, b"ann"), (None, b"\xff"), (None, b"bo"), (None, b"\xfe")], partition=0)
    session.execute(
        "CREATE SOURCE names FROM KAFKA CONNECTION kafka (TOPIC 'names') FORMAT TEXT WITH (REDIRECT ERRORS = dlq)"
    )
    create = "CREATE MATERIALIZED VIEW mv AS SELECT upper(text) AS t FROM names"
    _, ran, (view, dead) = ingested_program(session, create, "names", "SELECT * FROM mv", 'SELECT error, "offset" FROM dlq')
    assert "raised" not in ran
    assert sorted(ran["rows"]) == view == [("ANN",), ("BO",)]
    assert sorted(offset for _, offset in dead) == [1, 3]


@pytest.mark.long  # three upsert streams start: ~25 s
def test_a_materialized_view_over_an_upsert_source(session, kafka, tmp_path) -> None:
    """Also the program's own ingestion: the files it writes read back as the source's
    rows and errors."""
    session.execute(
        "CREATE SOURCE updates FROM KAFKA CONNECTION kafka (TOPIC 'updates') KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT"
    )
    create = "CREATE MATERIALIZED VIEW mv AS SELECT key, data::text AS d FROM updates"
    text, ran, (error, oks) = ingested_program(
        session, create, "updates", "SELECT * FROM mv", "SELECT key, data::text FROM IGNORE ERRORS updates"
    )
    assert ".join(" in text and '"left_anti"' in text and '.agg(F.max_by(' in text
    # The job fails on the first error of a guard read in it (Spark's message around it).
    assert f"sluice guard failed: run 0: {error}" in str(ran["raised"])
    assert error.startswith("Envelope error: Upsert: Value error: Failed to decode JSON")
    ingest(session, ran, "updates", tmp_path)
    written = written_collection(session, ran, "updates", tmp_path)
    assert sorted((r.key, r.data.toJson()) for r in written.oks.collect()) == oks == [("k1", '{"v":2}')]
    assert [r.message for r in written.errs.collect()] == [error]


def test_a_sink_from_a_dead_letter_table(session, kafka) -> None:
    """The printed program's pairs are the dead-letter rows the sink writes as Kafka
    Connect's DLQ messages: each bad message's place, bytes and error."""
    import base64
    import json

    kafka.create_topic("names", 1)
    produce(kafka.bootstrap, "names", [(None, b"ann"), (b"k", b"\xff"), (None, b"bo"), (None, b"\xfe")], partition=0)
    session.execute(
        "CREATE SOURCE names FROM KAFKA CONNECTION kafka (TOPIC 'names') FORMAT TEXT WITH (REDIRECT ERRORS = dlq)"
    )
    create = "CREATE SINK bad FROM dlq INTO KAFKA CONNECTION kafka (TOPIC 'bad')"
    text, ran, (dead,) = ingested_program(session, create, "names", 'SELECT "offset", error FROM dlq')
    assert "raised" not in ran and "F.transform(" in text and "lambda h: " in text
    pairs = [(bytes(identity).decode(), json.loads(bytes(payload))) for identity, payload in ran["rows"]]
    assert [identity for identity, _ in pairs] == ["0:1", "0:3"]
    assert [(p["offset"], p["error"]) for _, p in pairs] == dead
    assert [base64.b64decode(p["value"]) for _, p in pairs] == [b"\xff", b"\xfe"]
    assert base64.b64decode(pairs[0][1]["key"]) == b"k"
