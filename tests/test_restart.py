"""Restart: sessions killed (SIGKILL of their process) at random points while their
sources ingest — ENVELOPE NONE with a dead-letter table, and UPSERT under a materialized
view — then reopened on the same data directory show exactly what was produced: nothing
lost, nothing duplicated, in rows, errors, dead-letter rows and the source counters.
The default run kills five sessions in turn; `pytest -m long` kills twelve."""

from __future__ import annotations

import random

import pytest

from sluice.kafka.embedded import EmbeddedKafka
from tests.store_faults import Produced, kill_rounds, open_session, outcome


@pytest.mark.parametrize("rounds", [5, pytest.param(12, marks=pytest.mark.long)])
def test_killed_sessions_resume_with_nothing_lost_or_duplicated(spark, tmp_path, rounds) -> None:
    data_dir = tmp_path / "data"
    with EmbeddedKafka() as kafka:
        produced = Produced(kafka.bootstrap, seed=rounds)
        produced.create_topics(kafka)
        produced.more(20)
        kill_rounds(data_dir, produced, rounds, random.Random(rounds), tmp_path / "child.log")
        produced.more(10)
        assert list(data_dir.glob("streams/*/commits/*.json")), "the killed sessions committed nothing"
        with open_session(data_dir, kafka.bootstrap) as reopened:
            assert outcome(reopened, produced) == "right"
