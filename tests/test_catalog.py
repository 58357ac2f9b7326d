"""The durable catalog: exact restore on reopen, crash-safe writes, refusal to touch a
catalog file it cannot read."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog.lock import LOCK_FILE
from sluice.catalog.store import FILE_NAME, IDS_FILE, DurableCatalog
from sluice.errors import CatalogCorrupt

SETUP = "CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092')"


def test_reopen_restores_the_catalog(tmp_path) -> None:
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute_script(
            SETUP + ";"
            "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT VALUE "
            "FORMAT JSON INCLUDE OFFSET ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE) "
            "WITH (REDIRECT ERRORS = dlq, TIMELINE = 'orders');"
            "CREATE MATERIALIZED VIEW mv AS SELECT key, count(*) FROM s GROUP BY key;"
            "CREATE TABLE t (a int NOT NULL DEFAULT 1, b text[])"
        )
        before = session.catalog.current
    reopened = sluice.Session(tmp_path, check_kafka=False)
    assert reopened.catalog.current == before
    assert reopened.execute("SHOW COLUMNS FROM mv").rows == [
        ("key", False, "text"),
        ("count", False, "bigint"),
    ]


def test_ids_are_never_reused(tmp_path) -> None:
    session = sluice.Session(tmp_path, check_kafka=False)
    session.execute_script(SETUP + "; CREATE TABLE a (x int); DROP TABLE a; CREATE TABLE b (x int)")
    ids = [item.id for item in session.catalog.current]
    assert ids == ["u1", "u3"]
    session.close()
    assert sluice.Session(tmp_path, check_kafka=False).catalog.current.next_id == 4


def test_a_failed_statement_changes_nothing(tmp_path) -> None:
    session = sluice.Session(tmp_path, check_kafka=False)
    session.execute(SETUP)
    before = (tmp_path / FILE_NAME).read_bytes()
    with pytest.raises(sluice.SqlError):
        session.execute(
            "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT INCLUDE KEY "
            "WITH (REDIRECT ERRORS = dlq)"
        )
    assert (tmp_path / FILE_NAME).read_bytes() == before
    assert [i.name for i in session.catalog.current] == ["kafka"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is corrupt"),
        ('{"format": "something else"}', "is corrupt"),
        ('{"format": "sluice-catalog", "version": 1, "next_id": 2, "items": [{"@": "Item"}]}',
         "is corrupt"),
        ('{"format": "sluice-catalog", "version": 99, "next_id": 1, "items": []}',
         "newer than this sluice understands"),
    ],
)
def test_unreadable_catalog_is_reported_and_left_alone(tmp_path, content, message) -> None:
    path = tmp_path / FILE_NAME
    path.write_text(content)
    with pytest.raises(CatalogCorrupt, match=message) as info:
        sluice.Session(tmp_path, check_kafka=False)
    assert info.value.code == "XX001"
    assert path.read_text() == content


def test_no_temp_files_are_left_behind(tmp_path) -> None:
    session = sluice.Session(tmp_path, check_kafka=False)
    session.execute_script(SETUP + "; CREATE TABLE a (x int); DROP TABLE a")
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME, LOCK_FILE, IDS_FILE]
    json.loads((tmp_path / FILE_NAME).read_text())


# A random walk of CREATE and DROP statements; some fail (duplicates, dependents), which
# is part of the point: failures must leave the durable catalog exactly as it was.
NAMES = ["a", "b", "c", "d"]
STATEMENTS = st.one_of(
    st.builds(
        lambda n, tl, dlq: (
            f"CREATE SOURCE {n} FROM KAFKA CONNECTION kafka (TOPIC '{n}') FORMAT TEXT"
            + (f" WITH (REDIRECT ERRORS = {n}_dlq, TIMELINE = '{tl}')" if dlq else "")
        ),
        st.sampled_from(NAMES),
        st.sampled_from(["x", "y"]),
        st.booleans(),
    ),
    st.builds(lambda n: f"CREATE TABLE {n} (text text, n bigint)", st.sampled_from(NAMES)),
    st.builds(
        lambda n, m, mat: f"CREATE {'MATERIALIZED ' if mat else ''}VIEW {n} AS SELECT * FROM {m}",
        st.sampled_from(NAMES),
        st.sampled_from(NAMES + ["a_dlq"]),
        st.booleans(),
    ),
    st.builds(
        lambda kind, n, cascade: f"DROP {kind} IF EXISTS {n}{' CASCADE' if cascade else ''}",
        st.sampled_from(["SOURCE", "TABLE", "VIEW", "MATERIALIZED VIEW"]),
        st.sampled_from(NAMES),
        st.booleans(),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STATEMENTS, max_size=12))
def test_reopen_after_any_create_drop_sequence_is_identical(tmp_path_factory, statements) -> None:
    data_dir = tmp_path_factory.mktemp("catalog")
    session = sluice.Session(data_dir, check_kafka=False)
    session.execute(SETUP)
    for statement in statements:
        try:
            session.execute(statement)
        except sluice.SqlError:
            pass
        # What a reopen would read (the session still holds the directory).
        assert DurableCatalog(data_dir).current == session.catalog.current


DANGLING_SETUP = (
    SETUP + ";"
    "CREATE SOURCE j FROM KAFKA CONNECTION kafka (TOPIC 'in') FORMAT JSON;"
    "CREATE VIEW v AS SELECT data->>'k' AS k, count(*) FROM j GROUP BY 1"
)


def _dangle_view(items: list[dict]) -> tuple[str, str]:
    view = next(i for i in items if i["name"] == "v")
    view["depends_on"] = ["u9"]
    return "u9", 'view "v"'


def _dangle_connection(items: list[dict]) -> tuple[str, str]:
    source = next(i for i in items if i["name"] == "j")
    source["details"]["connection"] = source["depends_on"][0] = "u9"
    return "u9", 'source "j"'


def _lose_source(items: list[dict]) -> tuple[str, str]:
    """The view's source gone, by id and by name: the view's stored SQL names nothing."""
    source = next(i for i in items if i["name"] == "j")
    items.remove(source)
    return source["id"], 'view "v"'


SINK = "s FROM v INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (k) FORMAT JSON ENVELOPE UPSERT"


@pytest.mark.parametrize(
    ("dangle", "statement"),
    [
        *(
            (dangle, statement)
            for dangle in (_dangle_view, _dangle_connection, _lose_source)
            for statement in (
                "EXPLAIN SELECT * FROM v",
                "EXPLAIN TIMELINE FOR SELECT k FROM v",
                "EXPLAIN PYSPARK FOR SELECT * FROM v",
                f"EXPLAIN CREATE SINK {SINK}",
            )
        ),
        # creating over v plans v; the source's connection is not read by that, so only v's own dangles
        (_dangle_view, "CREATE VIEW w AS SELECT * FROM v"),
        (_dangle_view, f"CREATE SINK {SINK}"),
    ],
)
def test_a_dangling_reference_is_a_damaged_catalog_naming_the_missing_item(tmp_path, dangle, statement) -> None:
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute_script(DANGLING_SETUP)
    path = tmp_path / FILE_NAME
    data = json.loads(path.read_text())
    missing, referrer = dangle(data["items"])
    path.write_text(json.dumps(data))
    with sluice.Session(tmp_path, check_kafka=False) as session:
        with pytest.raises(sluice.SqlError) as info:
            session.execute(statement)
        error = info.value
        assert (error.code, error.message) == ("XX001", f"catalog is corrupt: it has no item {missing}")
        assert error.detail == f"{missing} is referred to by {referrer}"
        assert error.hint == "drop what refers to it, or restore the catalog file from a backup"
        # as the hint says: dropping the damaged item repairs the catalog
        session.execute("DROP VIEW v" if referrer == 'view "v"' else "DROP SOURCE j CASCADE")
        assert "v" not in [i.name for i in session.catalog.current]


# -- an older catalog.json put back ------------------------------------------------------

LATER = [
    "CREATE SOURCE a FROM KAFKA CONNECTION k (TOPIC 'ta') FORMAT TEXT WITH (REDIRECT ERRORS = a_dlq)",
    "CREATE SECRET pw AS 'hunter2'",
    "CREATE TABLE gone (a int)",
    "INSERT INTO gone VALUES (7)",
    "CREATE SINK sk FROM keep INTO KAFKA CONNECTION k (TOPIC 'o1') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT",
    "DROP TABLE gone",
]


@pytest.mark.parametrize("under_uri", [False, True], ids=["data-dir", "data-uri"])
def test_an_older_catalog_put_back_reuses_no_id_and_deletes_nothing(spark, kafka, tmp_path, under_uri) -> None:
    """Items created after a copy of catalog.json was taken (a source with stored rows, a
    secret, a sink, a dropped table) are unknown to that copy put back: their files are
    set aside, named in the warnings, and new items get ids none of them had."""
    from sluice.kafka.embedded import produce
    from tests.support.sinks import read_committed, upserted
    from tests.support.store_faults import data_root

    for topic in ("ta", "tb", "o1", "o2"):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap, "ta", [(None, b"a1"), (None, b"a2")])
    produce(kafka.bootstrap, "tb", [(None, b"b1")])
    data_dir = tmp_path / "d"
    uri = f"file://{tmp_path}/data" if under_uri else None
    with sluice.Session(data_dir, data_uri=uri) as session:
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute("CREATE TABLE keep (a int)")
        older = (data_dir / FILE_NAME).read_bytes()
        for sql in LATER:
            session.execute(sql)
        assert session.execute("SELECT text FROM a ORDER BY text").rows == [("a1",), ("a2",)]
        ids = {item.name: item.id for item in session.catalog.current}
        assert ids == {"k": "u1", "keep": "u2", "a": "u3", "a_dlq": "u4", "pw": "u5", "sk": "u7"}
    (data_dir / FILE_NAME).write_bytes(older)
    data = data_root(data_dir)
    with sluice.Session(data_dir) as session:
        (stamp,) = [p.name for p in (data_dir / "orphaned").iterdir()]
        moved = [(data_dir, "secrets/u5"), (session.data, "sinks/u7, streams/u3")] if under_uri else [
            (data_dir, "secrets/u5, sinks/u7, streams/u3")
        ]
        assert session.notices == [
            f'catalog "{data_dir / FILE_NAME}" would number its next item u3, but items up to u7 were '
            "created in this data directory (was an older catalog.json put back?): new items are "
            "numbered from u8",
            *(
                f'files of items the catalog does not name were moved to "{root}/orphaned/{stamp}": {names}'
                for root, names in moved
            ),
        ]
        # Nothing was deleted: the secret's value and the source's and sink's folders.
        assert (data_dir / "orphaned" / stamp / "secrets" / "u5").read_text() == "hunter2"
        assert list((data / "orphaned" / stamp / "streams" / "u3").glob("commits/*.json"))
        assert (data / "orphaned" / stamp / "sinks" / "u7").is_dir()
        assert not any((data / folder / name).exists() for folder, name in [("streams", "u3"), ("sinks", "u7")])
        # New items: a source reading its own topic only, a sink delivering what it should.
        session.execute("CREATE SOURCE a FROM KAFKA CONNECTION k (TOPIC 'tb') FORMAT TEXT WITH (REDIRECT ERRORS = a_dlq)")
        session.execute(
            "CREATE SINK sk FROM keep INTO KAFKA CONNECTION k (TOPIC 'o2') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT"
        )
        session.execute("CREATE SECRET pw AS 'other'")
        assert {i.name: i.id for i in session.catalog.current if i.name in ("a", "a_dlq", "sk", "pw")} == {
            "a": "u8", "a_dlq": "u9", "sk": "u10", "pw": "u11"
        }
        assert session.execute("SELECT text FROM a").rows == [("b1",)]
        session.execute("INSERT INTO keep VALUES (5)")
        assert session.drain_sinks(120) == []
    assert upserted(read_committed(kafka.bootstrap, "o2")) == {b'{"a":5}': b'{"a":5}'}
    assert (data_dir / "orphaned" / stamp / "secrets" / "u5").read_text() == "hunter2"
    assert (data_dir / IDS_FILE).read_text() == "12\n"
    with sluice.Session(data_dir) as session:  # opened again: nothing more to set aside
        assert session.notices == []
