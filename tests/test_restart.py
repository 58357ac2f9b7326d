"""Restart: sessions killed (SIGKILL of their process) at random points while their
sources ingest — ENVELOPE NONE with a dead-letter table, and UPSERT under a materialized
view — then reopened on the same data directory show exactly what was produced: nothing
lost, nothing duplicated, in rows, errors, dead-letter rows and the source counters.
The default run kills two sessions in turn; `pytest -m long` kills twelve."""

from __future__ import annotations

import pytest

from tests.support.store_faults import killed_and_reopened


@pytest.mark.parametrize("rounds", [2, pytest.param(12, marks=pytest.mark.long)])
def test_killed_sessions_resume_with_nothing_lost_or_duplicated(spark, tmp_path, rounds) -> None:
    assert killed_and_reopened(tmp_path, rounds, rounds, "streams/*/commits/*.json") == "right"
