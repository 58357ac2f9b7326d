"""Tables: CREATE TABLE, INSERT, UPDATE, DELETE, stored durably, readable with sources."""

from __future__ import annotations

import pytest

import sluice
from sluice.kafka.embedded import produce
from sluice.storage.location import disk


@pytest.fixture
def session(spark, tmp_path):
    with sluice.Session(tmp_path, check_kafka=False) as s:
        s.execute("CREATE TABLE t (a int NOT NULL, b text DEFAULT 'x', c double precision)")
        yield s


def rows(session, sql: str) -> list:
    return session.execute(sql).rows


def test_insert_update_delete(session) -> None:
    assert session.execute("INSERT INTO t VALUES (1, 'one', 1.5), (2, NULL, 2)").status == "INSERT 0 2"
    assert session.execute("INSERT INTO t (a) VALUES (3)").status == "INSERT 0 1"
    assert rows(session, "SELECT * FROM t ORDER BY a") == [(1, "one", 1.5), (2, None, 2.0), (3, "x", None)]
    assert session.execute("UPDATE t SET b = upper(b), c = c * 2 WHERE a < 3").status == "UPDATE 2"
    assert rows(session, "SELECT b, c FROM t ORDER BY a") == [("ONE", 3.0), (None, 4.0), ("x", None)]
    # A NULL condition touches nothing, as in PostgreSQL.
    assert session.execute("DELETE FROM t WHERE b = 'nope' OR c > 3.5").status == "DELETE 1"
    assert session.execute("DELETE FROM t WHERE c > NULL").status == "DELETE 0"
    assert rows(session, "SELECT a FROM t ORDER BY a") == [(1,), (3,)]
    assert session.execute("INSERT INTO t SELECT a + 10, b, c FROM t").status == "INSERT 0 2"
    assert rows(session, "SELECT count(*), sum(a) FROM t") == [(4, 28)]


def test_insert_from_a_view_fills_named_columns_and_defaults(session) -> None:
    session.execute_script(
        "CREATE TABLE u (x int, y text);"
        "INSERT INTO u VALUES (1, 'one'), (2, 'two'), (-3, 'minus');"
        "CREATE VIEW v AS SELECT x * 2 AS x2, upper(y) AS y FROM u WHERE x > 0"
    )
    assert session.execute("INSERT INTO t (c, a) SELECT x2 / 4.0, x2 FROM v").status == "INSERT 0 2"
    assert rows(session, "SELECT * FROM t ORDER BY a") == [(2, "x", 0.5), (4, "x", 1.0)]
    assert session.execute("UPDATE t SET b = (SELECT max(y) FROM v) WHERE a = 4").status == "UPDATE 1"
    assert rows(session, "SELECT a, b FROM t ORDER BY a") == [(2, "x"), (4, "TWO")]


def test_constraints_and_column_errors(session) -> None:
    with pytest.raises(sluice.SqlError, match='null value in column "a" of relation "t" violates') as info:
        session.execute("INSERT INTO t (b) VALUES ('no a')")
    assert info.value.code == "23502"
    with pytest.raises(sluice.SqlError, match='column "z" of relation "t" does not exist'):
        session.execute("INSERT INTO t (z) VALUES (1)")
    with pytest.raises(sluice.SqlError, match="more expressions than target columns"):
        session.execute("INSERT INTO t (a) VALUES (1, 2)")
    with pytest.raises(sluice.SqlError, match='column "z" of relation "t" does not exist'):
        session.execute("UPDATE t SET z = 1")
    assert rows(session, "SELECT count(*) FROM t") == [(0,)]


def test_rows_survive_a_reopen_and_go_with_drop(session, tmp_path) -> None:
    session.execute("INSERT INTO t VALUES (1, 'kept', NULL)")
    session.close()
    with sluice.Session(tmp_path, check_kafka=False) as reopened:
        assert reopened.execute("SELECT b FROM t").rows == [("kept",)]
        reopened.execute("DROP TABLE t")
        reopened.execute("CREATE TABLE t (a int NOT NULL, b text DEFAULT 'x', c double precision)")
        assert rows(reopened, "SELECT count(*) FROM t") == [(0,)]


def test_tables_join_sources_on_the_same_timeline(spark, kafka) -> None:
    kafka.create_topic("names", 1)
    produce(kafka.bootstrap, "names", [(b"1", b"ada"), (b"2", b"bob")], partition=0)
    with sluice.Session() as session:
        session.execute_script(
            f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}');"
            "CREATE SOURCE names FROM KAFKA CONNECTION k (TOPIC 'names') "
            "KEY FORMAT TEXT VALUE FORMAT TEXT ENVELOPE UPSERT;"
            "CREATE TABLE scores (id text, score int);"
            "INSERT INTO scores VALUES ('1', 10), ('2', 20), ('3', 30)"
        )
        assert rows(session, "SELECT n.text, s.score FROM names n JOIN scores s ON n.key = s.id ORDER BY 2") == [
            ("ada", 10),
            ("bob", 20),
        ]


def test_a_write_replaces_the_table_file_whole_or_not_at_all(tmp_path) -> None:
    """`TableStore` writes through the one atomic replacement (`Location.replace`): the new
    rows or the old, never a partial file, and no temporary file left behind."""
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute("CREATE TABLE t (a int, b bytea)")
        item = session.catalog.current.get("t")
        session.tables.write(item, [(1, b"\x00\xff"), (None, None)])
        with pytest.raises(TypeError):  # a value the file cannot hold fails before the rename
            session.tables.write(item, [(2, b"ok"), (object(), None)])
        assert session.tables.read(item) == [(1, b"\x00\xff"), (None, None)]
        assert [p.name for p in disk(session.tables.root).iterdir()] == [f"{item.id}.jsonl"]
        assert (disk(session.tables.root) / f"{item.id}.jsonl").stat().st_mode & 0o777 == 0o600
