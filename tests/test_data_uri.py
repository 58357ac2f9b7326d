"""Data under a data URI: Hadoop's filesystem (`storage.HadoopFiles`) does what the
driver's own does (`LocalFiles`), and a session keeps its streams, sinks and tables there
and reopens from them."""

from __future__ import annotations

import io
import json
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.kafka.embedded import produce
from sluice.storage.location import HadoopFiles, Location, local
from tests.support.sinks import read_committed, upserted

FILES = ["a", "b", "d/a", "d/b", "e/a"]
FOLDERS = ["d", "e"]
OPERATIONS = st.one_of(
    st.tuples(st.just("replace"), st.sampled_from(FILES), st.binary(max_size=40)),
    st.tuples(st.just("parquet"), st.sampled_from(FILES), st.integers(0, 5)),
    st.tuples(st.just("remove"), st.sampled_from(FILES + FOLDERS)),
    st.tuples(st.just("move"), st.sampled_from(FILES), st.sampled_from(FILES)),
    st.tuples(st.just("move"), st.sampled_from(FOLDERS), st.sampled_from(FOLDERS)),
    st.tuples(st.just("make_dirs"), st.sampled_from(FOLDERS)),
)


def tree(root: Location) -> dict:
    """Everything a caller can see of the files under `root`."""
    seen: dict = {"": [c.name for c in root.children()]}
    for name in FOLDERS:
        folder = root / name
        seen[name] = (folder.exists(), folder.is_dir(), [c.name for c in folder.children("*")])
    for name in FILES:
        file = root / name
        if file.exists():
            data = file.read_bytes()
            rows = file.parquet_rows() if data.startswith(b"PAR1") else None
            seen[name] = (data, file.stat()[0], file.crc32(), rows)
        else:
            with pytest.raises(FileNotFoundError):
                file.stat()
            seen[name] = file.version()
    return seen


def apply(root: Location, operation: tuple) -> None:
    kind, name, *more = operation
    if kind == "replace":
        (root / name).replace(more[0])
    elif kind == "parquet":
        out = io.BytesIO()
        pq.write_table(pa.table({"n": list(range(more[0]))}), out)
        (root / name).replace(out.getvalue())
    elif kind == "remove":
        (root / name).remove()
    elif kind == "move":
        (root / name).move_to(root / more[0])
    else:
        (root / name).make_dirs()


def applies(root: Location, operation: tuple) -> bool:
    """Whether sluice would ask for the operation: a move's source exists, its target
    does not and has its folder (see `Location.move_to`)."""
    kind, name, *more = operation
    if kind != "move":
        return True
    source, target = root / name, root / more[0]
    return source.exists() and not target.exists() and (target.parent.is_dir() or "/" not in more[0])


@pytest.mark.spark
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=st.lists(OPERATIONS, max_size=8))
def test_hadoop_files_do_what_local_files_do(spark, tmp_path_factory, operations) -> None:
    ours = local(tmp_path_factory.mktemp("local"))
    hadoops = Location(HadoopFiles(lambda: spark), f"file://{tmp_path_factory.mktemp('hadoop')}")
    for operation in operations:
        if applies(ours, operation):
            apply(ours, operation)
            apply(hadoops, operation)
        assert tree(hadoops) == tree(ours), operation
    for name in FILES:  # CRC-32 in the JVM is zlib's
        if (ours / name).exists():
            assert (hadoops / name).crc32() == zlib.crc32((ours / name).read_bytes())


def test_a_data_directory_keeps_its_data_where_it_first_put_it(tmp_path: Path) -> None:
    with sluice.Session(tmp_path / "d", check_kafka=False, data_uri=f"file://{tmp_path}/data"):
        pass
    recorded = (tmp_path / "d" / "data-location").read_text()
    assert recorded.startswith(f"file://{tmp_path}/data/")
    with sluice.Session(tmp_path / "d", check_kafka=False) as session:  # the record decides
        assert session.data.path == recorded
    with pytest.raises(sluice.SqlError) as info:
        sluice.Session(tmp_path / "d", check_kafka=False, data_uri=f"file://{tmp_path}/elsewhere")
    assert info.value.code == "55000"
    assert info.value.message == (
        f'data directory "{tmp_path}/d" keeps its data under "{recorded}", not under "file://{tmp_path}/elsewhere"'
    )
    (tmp_path / "e" / "tables").mkdir(parents=True)  # a data directory with data of its own
    with pytest.raises(sluice.SqlError) as info:
        sluice.Session(tmp_path / "e", check_kafka=False, data_uri=f"file://{tmp_path}/data")
    assert info.value.message == f'data directory "{tmp_path}/e" keeps its data in itself, not under "file://{tmp_path}/data"'


SETUP = [
    "CREATE SOURCE src FROM KAFKA CONNECTION k (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT TEXT "
    "ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE)",
    "CREATE MATERIALIZED VIEW v AS SELECT key, text FROM src",
    "CREATE SOURCE raw FROM KAFKA CONNECTION k (TOPIC 'r') FORMAT TEXT WITH (REDIRECT ERRORS = dlq)",
    "CREATE TABLE tb (a int)",
    "INSERT INTO tb VALUES (1), (2)",
    "CREATE SINK sk FROM tb INTO KAFKA CONNECTION k (TOPIC 'out') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT",
]


@pytest.mark.spark
def test_a_session_keeps_its_data_under_the_data_uri_and_reopens_from_it(
    spark, kafka, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SLUICE_COMPACT_AFTER", "2")
    kafka.create_topic("t", 2)
    kafka.create_topic("r", 1)
    kafka.create_topic("out", 1)
    data_dir, uri = tmp_path / "d", f"file://{tmp_path}/data"
    with sluice.Session(data_dir, data_uri=uri) as session:
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}')")
        for sql in SETUP:
            session.execute(sql)
        for round_ in range(4):  # commits enough for a compaction
            produce(kafka.bootstrap, "t", [(b"a", b"%d" % round_), (b"b", b"\xff")], partition=0)
            produce(kafka.bootstrap, "t", [(b"c", None), (b"c", b"c%d" % round_)], partition=1)
            produce(kafka.bootstrap, "r", [(None, b"ok%d" % round_), (None, b"\xfe")])
            assert session.execute("SELECT * FROM v ORDER BY key").rows == [
                ("a", str(round_)), ("b", None), ("c", f"c{round_}")
            ]
        assert session.execute("SELECT count(*) FROM raw").rows == [(4,)]
        assert session.execute('SELECT "offset" FROM dlq ORDER BY 1').rows == [(1,), (3,), (5,), (7,)]
        session.execute("UPDATE tb SET a = 3 WHERE a = 2")
        assert session.drain_sinks(120) == []
        (folder,) = Path(f"{tmp_path}/data").iterdir()
        deadline = time.monotonic() + 120
        while not list(folder.glob("streams/*/compacted/*.json")):  # compactions run in the background
            assert time.monotonic() < deadline, "no compaction ran"
            time.sleep(0.2)
    assert sorted(p.name for p in folder.iterdir()) == ["sinks", "streams", "tables"]
    assert not any((data_dir / name).exists() for name in ("sinks", "streams", "tables"))
    sent = upserted(read_committed(kafka.bootstrap, "out"))
    assert {json.loads(k)["a"]: json.loads(v)["a"] for k, v in sent.items()} == {1: 1, 3: 3}
    # A flipped byte in a file of a base compacted under the URI is found through Hadoop's
    # reads, and the source is read again from Kafka.
    bases = sorted(folder.glob("streams/*/compacted/*.json"))
    record = json.loads(bases[-1].read_text())
    victim = bases[-1].parent.parent / next(f["path"] for f in record["files"] if f["kind"] == "oks")
    damaged = bytearray(victim.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    victim.write_bytes(bytes(damaged))
    with sluice.Session(data_dir) as session:
        assert session.execute("SELECT * FROM v ORDER BY key").rows == [("a", "3"), ("b", None), ("c", "c3")]
        assert session.execute("SELECT count(*) FROM raw").rows == [(4,)]
        assert session.execute("SELECT a FROM tb ORDER BY a").rows == [(1,), (3,)]
    assert not victim.exists()  # dropped by the repair
