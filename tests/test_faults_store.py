"""The store never answers short. Each damage to continuously ingested sources' stores or
checkpoints — done to an ENVELOPE NONE source with a dead-letter table and to an UPSERT
source under a materialized view at once, with the session stopped or while it runs — is
repaired from Kafka: every relation shows exactly what was produced. When Kafka no longer
holds what a repair must read again, every read fails loudly and the store is untouched.
A full disk fails writes with PostgreSQL's disk_full (53100), losing nothing."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import sluice
from sluice.catalog.store import IDS_FILE
from sluice.errors import SqlError
from sluice.kafka.embedded import EmbeddedKafka, produce
from tests.support.store_faults import DAMAGES, WHILE_RUNNING, Produced, baseline, damage_case, open_session, stores

# The damages issue 14 names, with the session stopped and one while it runs, are the
# default tier; every other damage, stopped and running, is the long tier (`-m long`).
NAMED = {
    "file emptied", "file deleted", "batch folder deleted", "checkpoint deleted", "commit record truncated",
    "stray files added",
}
CASES = [
    pytest.param(
        damage,
        running,
        id=damage.replace(" ", "-") + ("-while-running" if running else ""),
        marks=() if damage in NAMED and (not running or damage == "file emptied") else pytest.mark.long,
    )
    for running, damages in [(False, DAMAGES), (True, WHILE_RUNNING)]
    for damage in damages
]


@pytest.fixture(scope="module")
def ingested(spark, tmp_path_factory):
    """A broker, what was produced to it, and a data directory that ingested it (`base`),
    with each store's checkpoint as it was after the first of its commits (`older`)."""
    with EmbeddedKafka() as kafka:
        produced = Produced(kafka.bootstrap)
        produced.create_topics(kafka)
        root = tmp_path_factory.mktemp("stores")
        baseline(root / "base", root / "older", produced)
        yield produced, root


@pytest.mark.parametrize(("damage", "running"), CASES)
def test_a_damaged_store_shows_exactly_what_was_produced(ingested, tmp_path, damage, running) -> None:
    produced, root = ingested
    assert damage_case(root / "base", root / "older", tmp_path, produced, damage, running) == "right"


# The embedded broker keeps about 5 MiB per partition: 8 MiB pushes the low mark up.
BURY = [(None, b"x" * 1024) for _ in range(8_000)]


def test_damage_kafka_no_longer_holds_fails_loudly_and_changes_nothing(spark, tmp_path) -> None:
    data_dir = tmp_path / "data"
    with EmbeddedKafka() as kafka:
        produced = Produced(kafka.bootstrap)
        produced.create_topics(kafka)
        baseline(data_dir, tmp_path / "older", produced, rounds=2)
        for store in stores(data_dir):
            DAMAGES["file deleted"](store, None)
        before = sorted(str(p) for p in (data_dir / "streams").rglob("*"))
        for topic in ("n", "u"):
            produce(kafka.bootstrap, topic, BURY, partition=0)
        with open_session(data_dir, kafka.bootstrap) as session:
            for relation, source in [("n", "n"), ("dlq", "n"), ("mv", "u"), ("u", "u")]:
                for _ in range(2):  # and again: the store is left as it was
                    with pytest.raises(SqlError) as failed:
                        session.execute(f"SELECT * FROM {relation}")
                    error = failed.value
                    assert error.code == "XX001"
                    assert error.message.startswith(
                        f'Source error: the stored data of source "{source}" is damaged: '
                        'commit 1: file "batches/1/'
                    )
                    assert error.message.endswith('.parquet" is missing')
                    assert error.detail.startswith(
                        "Kafka no longer holds what the repair must read again: partition 0 from offset "
                    )
                    assert "drop the source and create it again" in error.hint
        assert sorted(str(p) for p in (data_dir / "streams").rglob("*")) == before


@contextmanager
def small_disk(folder: Path, size: str = "20m"):
    """A tmpfs of `size` mounted at `folder` (skips where mounting is not permitted), and a
    function filling it up to its last byte; unmounted after."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.decode().strip()}")

    def fill() -> None:
        for name, chunk in [("filler", b"x" * 65536), ("filler-bytes", b"x")]:
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
            finally:
                os.close(fd)

    try:
        yield fill
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_full_disk_is_53100_and_a_source_recovers_with_nothing_lost(spark, kafka, tmp_path) -> None:
    """A full disk (a real one: a 20 MiB tmpfs filled up) fails a table's INSERT, a CREATE
    and a source's ingestion with PostgreSQL's disk_full, naming the file or the store, and
    changes nothing; once space is freed the source catches up and the INSERT goes
    through, nothing lost."""
    kafka.create_topic("t", 1)
    first = [(None, b"a%d" % i) for i in range(10)]
    then = [(None, b"b%d" % i) for i in range(10)]
    produce(kafka.bootstrap, "t", first)
    with small_disk(tmp_path / "disk") as fill, sluice.Session(tmp_path / "disk" / "d") as session:
        session.execute_script(
            f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}');"
            "CREATE SOURCE src FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT WITH (REDIRECT ERRORS = dlq);"
            "CREATE TABLE tb (a text); INSERT INTO tb VALUES ('x')"
        )
        assert session.execute("SELECT count(*) FROM src").rows == [(10,)]
        store = session.data / "streams" / session.catalog.current.get("src").id
        table = session.data / "tables" / f"{session.catalog.current.get('tb').id}.jsonl"
        fill()
        for sql, path in [("INSERT INTO tb VALUES ('y')", table), ("CREATE TABLE t2 (a int)", session.data_dir / IDS_FILE)]:
            with pytest.raises(SqlError) as failed:
                session.execute(sql)
            assert (failed.value.code, failed.value.message, failed.value.hint) == (
                "53100", f'could not write to file "{path}": No space left on device', "Check free disk space."
            )
        assert session.catalog.current.get("t2") is None
        produce(kafka.bootstrap, "t", then)
        # The stream fails as it commits its next batch: the store (Spark's write, which
        # names no file) or a file of it (sluice's own write).
        disk_full = re.compile(rf'could not write to file "{re.escape(str(store))}(/[^"]*)?": No space left on device')
        e = _failure_with(session, "SELECT count(*) FROM src", "53100", 120)
        assert e.message.startswith('Source error: source "src" has failed: ')
        assert disk_full.fullmatch(e.message.removeprefix('Source error: source "src" has failed: '))
        assert e.hint == "the source recovers by itself once the fault clears"
        (row,) = session.execute("SHOW SOURCE STATISTICS FOR src").rows
        assert row[5] == "failed" and disk_full.fullmatch(row[6]), row
        for name in ("filler", "filler-bytes"):
            (tmp_path / "disk" / name).unlink()
        deadline = time.monotonic() + 180
        while True:
            try:
                rows = session.execute("SELECT text FROM src ORDER BY text").rows
                break
            except SqlError as e:
                assert time.monotonic() < deadline, e.message
                time.sleep(2)
        assert rows == sorted((v.decode(),) for _, v in first + then)
        assert session.execute("SELECT count(*) FROM dlq").rows == [(0,)]
        assert session.execute("INSERT INTO tb VALUES ('y')").status == "INSERT 0 1"
        assert session.execute("SELECT a FROM tb ORDER BY a").rows == [("x",), ("y",)]
        assert session.execute("SHOW SOURCE STATISTICS FOR src").rows[0][1] == 20


def _failure_with(session: sluice.Session, sql: str, code: str, timeout: float) -> SqlError:
    """The first error of `sql`, run again until it fails with `code` (a source's stream
    fails at its next commit; other failures on the way are Spark's slow Python workers)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            session.execute(sql)
        except SqlError as e:
            if e.code == code:
                return e
            assert time.monotonic() < deadline, e.message
        assert time.monotonic() < deadline, f"{sql} did not fail"
        time.sleep(1)


def test_a_full_disk_fails_a_sink_with_the_disk_full_text_and_it_delivers_once_there_is_space(
    spark, kafka, tmp_path
) -> None:
    """The data under a data URI on a small disk, the catalog beside it: a sink created
    once that disk is full shows `failed` with PostgreSQL's disk-full text, and delivers
    every row once space is freed."""
    from tests.support.sinks import read_committed, upserted

    kafka.create_topic("out", 1)
    uri = f"file://{tmp_path}/disk/data"
    with small_disk(tmp_path / "disk") as fill, sluice.Session(tmp_path / "d", data_uri=uri) as session:
        session.execute_script(
            f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}');"
            "CREATE TABLE tb (a int); INSERT INTO tb VALUES (1), (2)"
        )
        fill()
        session.execute("CREATE SINK sk FROM tb INTO KAFKA CONNECTION k (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT")
        ((name, status, error),) = session.drain_sinks(20)
        folder = session.data.path.removeprefix("file://") + "/sinks/" + session.catalog.current.get("sk").id
        assert (name, status) == ("sk", "failed")
        assert re.fullmatch(rf'could not write to file "(file:(//)?)?{re.escape(folder)}(/[^"]*)?": No space left on device', error), error
        for name in ("filler", "filler-bytes"):
            (tmp_path / "disk" / name).unlink()
        assert session.drain_sinks(120) == []
    assert upserted(read_committed(kafka.bootstrap, "out")) == {b'{"a":1}': b'{"a":1}', b'{"a":2}': b'{"a":2}'}
