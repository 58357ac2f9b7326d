"""The store never answers short. Each damage to continuously ingested sources' stores or
checkpoints — done to an ENVELOPE NONE source with a dead-letter table and to an UPSERT
source under a materialized view at once, with the session stopped or while it runs — is
repaired from Kafka: every relation shows exactly what was produced. When Kafka no longer
holds what a repair must read again, every read fails loudly and the store is untouched."""

from __future__ import annotations

import pytest

from sluice.errors import SqlError
from sluice.kafka.embedded import EmbeddedKafka, produce
from tests.store_faults import DAMAGES, WHILE_RUNNING, Produced, baseline, damage_case, open_session, stores

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
