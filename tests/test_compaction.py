"""Compaction of a source's committed batches (render/compaction.py): a read shows the same
before and after any compaction — rows, standing errors, the error log and dead-letter
rows, for ENVELOPE NONE and UPSERT stores, and an UPSERT store's state, its retractions
left out by a filter or by a join — many retractions start a compaction, the files a
compaction replaces outlive every read that may use them, a damaged base is damage like
any other, and sessions killed (SIGKILL) while their sources compact resume with nothing
lost or duplicated."""

from __future__ import annotations

import json
import random
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice import Session
from sluice.catalog.formats import Text
from sluice.catalog.items import SOURCE, Item, SourceDesc
from sluice.kafka.embedded import produce
from sluice.storage import store as store_module
from sluice.storage.compaction import compact, compact_after, remove_replaced
from sluice.storage.location import disk
from tests.compaction_model import ModelStore, random_batches, shown
from tests.support.store_faults import killed_and_reopened


def source(upsert: bool, redirected: bool) -> Item:
    desc = SourceDesc(
        "c", "t", Text(()), "upsert" if upsert else "none", dead_letter_table="d" if redirected else None
    )
    return Item("s", "s", SOURCE, "", details=desc)


def read(spark, model: ModelStore, joined: bool = False) -> dict[str, list]:
    """What a read of the store shows; `joined`: leaving out retracted rows by a join with
    them, as for many retractions, rather than by a filter of their places."""
    item = source(model.upsert, model.redirected)
    with pytest.MonkeyPatch.context() as patch:
        if joined:
            patch.setattr(store_module, "FILTERED_RETRACTIONS", -1)
        try:
            standing = model.store.standing(spark) if model.upsert else None
            return shown(model.store.collection(spark, item), standing)
        finally:
            model.store.release()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    upsert=st.booleans(),
    redirected=st.booleans(),
    seed=st.integers(0, 2**16),
    compactions=st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True),
)
def test_a_read_shows_the_same_before_and_after_any_compaction(
    spark, tmp_path_factory, upsert, redirected, seed, compactions
) -> None:
    model = ModelStore(tmp_path_factory.mktemp("store"), upsert, redirected)
    for number, batch in enumerate(random_batches(random.Random(seed), 10)):
        model.add(batch)
        if number + 1 in compactions:
            before = read(spark, model)
            assert compact(spark, model.store, upsert) == number
            assert read(spark, model) == before == model.expected()
    assert read(spark, model) == read(spark, model, joined=True) == model.expected()
    assert model.store.committed()[0] == max(compactions) - 1, "the compacted commits were not removed"


def test_many_retractions_start_a_compaction_before_many_commits(spark, kafka) -> None:
    # Two commits, the second retracting more than a read filters out without a join.
    keys = store_module.FILTERED_RETRACTIONS + 100
    kafka.create_topic("many", 1)
    produce(kafka.bootstrap, "many", [(b"k%d" % i, b"first") for i in range(keys)], partition=0)
    with Session() as session:
        session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            "CREATE SOURCE many FROM KAFKA CONNECTION kafka (TOPIC 'many') KEY FORMAT TEXT VALUE FORMAT TEXT "
            "ENVELOPE UPSERT"
        )
        session.execute("CREATE MATERIALIZED VIEW v AS SELECT text, count(*) FROM many GROUP BY text")
        assert session.execute("SELECT * FROM v").rows == [("first", keys)]
        produce(kafka.bootstrap, "many", [(b"k%d" % i, b"second") for i in range(keys)], partition=0)
        assert session.execute("SELECT * FROM v").rows == [("second", keys)]
        store = session.controller.running[session.catalog.current.get("many").id].store
        assert len(store.committed()) == 2 and compact_after() > 2
        deadline = time.monotonic() + 60
        while not store.bases() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert store.bases() == [1]
        assert session.execute("SELECT * FROM v").rows == [("second", keys)]


def test_files_a_compaction_replaces_stay_while_a_read_may_use_them(spark, tmp_path) -> None:
    model = ModelStore(tmp_path / "store", upsert=True, redirected=False)
    for batch in random_batches(random.Random(7), 5):
        model.add(batch)
    item = source(True, False)
    with model.store.reading():
        collection = model.store.collection(spark, item)  # lists commits 0 to 4
        standing = model.store.standing(spark)
        assert compact(spark, model.store, upsert=True) == 4
        assert (disk(model.store.batches) / "0").exists() and model.store.committed()[0] == 0
        assert shown(collection, standing) == model.expected()  # its queries run after the compaction
    model.store.release()
    assert remove_replaced(model.store)
    assert not (disk(model.store.batches) / "0").exists() and model.store.committed() == [4]
    model.add([("a", 9, False)])
    assert read(spark, model) == model.expected()
    assert model.store.totals().messages == len(model.messages)


def test_every_state_a_killed_compaction_leaves_reads_the_same(spark, tmp_path) -> None:
    """Killed while writing (a staging folder), after moving its files in (a base folder
    without its record), or while removing what the base replaces (some of it gone)."""
    model = ModelStore(tmp_path / "store", upsert=False, redirected=False)
    batches = random_batches(random.Random(11), 9)
    for batch in batches[:4]:
        model.add(batch)
    store = model.store
    assert compact(spark, store, upsert=False) == 3
    for batch in batches[4:]:
        model.add(batch)
    shutil.copytree(disk(store.compacted) / "3", disk(store.root) / "compaction-8-killed" / "out")
    shutil.copytree(disk(store.compacted) / "3", disk(store.compacted) / "8")  # moved in, no record yet
    assert read(spark, model) == model.expected()
    with store.reading():  # a read keeps what base 8 replaces
        assert compact(spark, store, upsert=False) == 8
    (disk(store.commits) / "5.json").unlink()  # then the clean-up was under way
    (disk(store.compacted) / "3.json").unlink()
    assert read(spark, model) == model.expected()
    assert store.recover("s", {0: 0, 1: 0}, upsert=False, lows=dict) == store.committed_offsets()
    assert not (disk(store.root) / "compaction-8-killed").exists()
    assert remove_replaced(store)
    assert store.committed() == [8] and store.bases() == [8]
    assert sorted(p.name for p in disk(store.compacted).iterdir()) == ["8", "8.json"]
    assert not any(disk(store.batches).iterdir())
    assert read(spark, model) == model.expected()


def test_a_damaged_base_is_damage_of_commit_0_and_is_read_again(spark, tmp_path) -> None:
    model = ModelStore(tmp_path / "store", upsert=False, redirected=True)
    for batch in random_batches(random.Random(3), 4):
        model.add(batch)
    compact(spark, model.store, upsert=False)
    model.add([("b", 1, False)])
    record = json.loads((disk(model.store.compacted) / "3.json").read_text())
    listed = disk(model.store.root) / record["files"][0]["path"]
    listed.write_bytes(listed.read_bytes()[:-1] + bytes([listed.read_bytes()[-1] ^ 1]))
    damage = model.store.inspect().damage
    assert damage.what == f'the compaction of commits 0 to 3: file "{record["files"][0]["path"]}" does not match its checksum'
    start = model.store.recover("s", {0: 0, 1: 0}, upsert=False, lows=lambda: {0: 0, 1: 0})
    assert start == {0: 0, 1: 0}  # everything is read again from Kafka
    assert model.store.bases() == [] and model.store.committed() == []
    assert not list(disk(model.store.compacted).iterdir()) and not list(disk(model.store.batches).iterdir())


@pytest.mark.parametrize("rounds", [1, pytest.param(6, marks=pytest.mark.long)])
def test_killed_sessions_compacting_resume_with_nothing_lost_or_duplicated(spark, tmp_path, monkeypatch, rounds) -> None:
    monkeypatch.setenv("SLUICE_COMPACT_AFTER", "1")  # the killed sessions compact all the time
    assert killed_and_reopened(tmp_path, rounds, 18, "streams/*/compacted/*.json") == "right"
