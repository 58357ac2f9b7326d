"""Access under faults: one process per data directory (real processes, SIGKILL included),
and secrets whose values never show — in the data directory, SHOW CREATE, EXPLAIN, error
texts, Spark's plans or its log — while a registry demanding a login and a SASL broker
get them (through real Spark)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog.lock import LOCK_FILE
from sluice.catalog.secrets import DIRECTORY
from sluice.catalog.store import FILE_NAME
from sluice.plan import plan
from sluice.syntax import redact_secrets
from sluice.syntax.ast import quote_string
from tests.support.access_scenarios import (
    REGISTRY_PASSWORD,
    SASL_PASSWORD,
    SASL_USER,
    SECRET_VALUES,
    lock_scenario,
    secret_scenario,
)


def test_a_second_process_is_refused_and_the_first_untouched_and_working(tmp_path) -> None:
    found = lock_scenario(tmp_path / "data", tries=2)
    assert (found.tried, found.refused, found.named_holder) == (4, 4, 4)
    assert found.touched == []
    assert found.holder_kept_working
    assert found.reopened_after_close and found.reopened_after_kill


def test_a_second_session_in_this_process_is_refused_until_the_first_closes(tmp_path) -> None:
    first = sluice.Session(tmp_path, check_kafka=False)
    with pytest.raises(sluice.SqlError) as info:
        sluice.Session(tmp_path, check_kafka=False)
    assert info.value.code == "55006"
    assert info.value.message == f'data directory "{tmp_path.resolve()}" is in use by process {os.getpid()}'
    assert info.value.hint
    first.execute("CREATE TABLE t (a int)")
    first.close()
    with sluice.Session(tmp_path, check_kafka=False) as second:
        assert second.execute("SHOW TABLES").rows == [("t", "table", None)]


def test_a_refused_session_creates_nothing_but_the_directory_and_lock(tmp_path) -> None:
    data_dir = tmp_path / "fresh"
    with sluice.Session(data_dir, check_kafka=False):
        assert sorted(p.name for p in data_dir.iterdir()) == [LOCK_FILE]
        with pytest.raises(sluice.SqlError):
            sluice.Session(data_dir, check_kafka=False)
        assert sorted(p.name for p in data_dir.iterdir()) == [LOCK_FILE]


def test_a_data_directory_that_cannot_be_opened_is_an_error(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(sluice.SqlError, match='cannot open data directory ".*file": File exists') as info:
        sluice.Session(tmp_path / "file")
    assert info.value.code == "58000"


def test_secret_values_live_in_files_of_their_own(tmp_path) -> None:
    with sluice.Session(tmp_path, check_kafka=False) as session:
        session.execute("CREATE SECRET pw AS 'first-Value'")
        (secret_id,) = [i.id for i in session.catalog.current if i.name == "pw"]
        path = tmp_path / DIRECTORY / secret_id
        assert path.read_text() == "first-Value"
        assert path.stat().st_mode & 0o777 == 0o600
        session.execute("ALTER SECRET pw AS 'second-Value'")
        assert path.read_text() == "second-Value"
        assert "Value" not in (tmp_path / FILE_NAME).read_text()
        session.execute("DROP SECRET pw")
        assert not path.exists()
        session.execute("CREATE SECRET kept AS 'k'")
    # A value written by a CREATE SECRET that crashed before its catalog commit is set
    # aside, and its id is never given to another item.
    (tmp_path / DIRECTORY / "u99").write_text("orphan")
    with sluice.Session(tmp_path, check_kafka=False) as session:
        assert sorted(p.name for p in (tmp_path / DIRECTORY).iterdir()) == ["u2"]
        (moved,) = (tmp_path / "orphaned").glob("*/secrets/u99")
        assert moved.read_text() == "orphan"
        assert session.notices == [
            f'files of items the catalog does not name were moved to "{moved.parent.parent}": secrets/u99'
        ]
        assert session.catalog.current.next_id == 100
    with sluice.Session(tmp_path, check_kafka=False) as session:  # said once
        assert (session.notices, session.catalog.current.next_id) == ([], 100)


def test_planning_never_reads_a_secret_and_a_lost_value_is_a_loud_error(tmp_path) -> None:
    with sluice.Session(tmp_path) as session:
        session.execute("CREATE SECRET pw AS 'x'")
        (tmp_path / DIRECTORY / "u1").unlink()
        session.execute(
            "CREATE CONNECTION k TO KAFKA (BROKER '127.0.0.1:9', SASL MECHANISMS PLAIN, "
            "SASL USERNAME 'u', SASL PASSWORD SECRET pw) WITH (VALIDATE = false)"
        )
        explain = sluice.parse_one("EXPLAIN CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT")
        assert plan(explain, session.catalog.current).rows
        with pytest.raises(sluice.SqlError, match='the value of secret "pw" cannot be read') as info:
            session.execute("CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT")
        assert info.value.code == "XX001"
        assert info.value.hint == "set it again with ALTER SECRET"


def test_secrets_reach_the_registry_and_sasl_and_show_nowhere(spark, tmp_path) -> None:
    found = secret_scenario(tmp_path / "data", messages=20)
    # A registry that requires a login, end to end: the session's look-up and Spark's
    # decoders (continuous and snapshot) log in; nothing was refused until the password
    # was made wrong on purpose (one CREATE and one snapshot read, then restored).
    assert found.decoded == found.produced == 40
    assert found.registry_by_id > 0
    assert found.registry_refused >= 2
    assert any("answered 401" in text for text in found.shown["errors"])
    # SASL credentials reach librdkafka, in the session and in a Spark task.
    assert (SASL_USER, SASL_PASSWORD) in found.sasl_logins_driver
    assert (SASL_USER, SASL_PASSWORD) in found.sasl_logins_task
    assert found.secret_file_modes == [0o600, 0o600]
    # …and no value shows anywhere else.
    assert set(found.shown) >= {"SHOW CREATE", "EXPLAIN", "errors", "Spark plans", "Spark log"}
    assert any("*********(redacted)" in plan for plan in found.shown["Spark plans"])
    assert found.files_checked > 5
    assert found.leaks == []
    assert REGISTRY_PASSWORD in SECRET_VALUES


# Every value holds a character none of the texts searched has otherwise, so finding the
# value in one can only be a leak.
@settings(max_examples=40, deadline=None)
@given(st.builds(lambda a, b: f"{a}\u00a7{b}", st.text(), st.text()))
def test_any_value_round_trips_through_its_file_and_is_shown_nowhere(value) -> None:
    statement = f"CREATE SECRET pw AS {quote_string(value)}"
    with tempfile.TemporaryDirectory() as scratch, sluice.Session(scratch, check_kafka=False) as session:
        session.execute(statement)
        catalog = session.catalog.current
        assert catalog.secret_value(catalog.get("pw").id) == value
        shown = [
            (Path(scratch) / FILE_NAME).read_text(encoding="utf-8"),
            *(row[1] for row in session.execute("SHOW CREATE SECRET pw").rows),
            session.plan_text(sluice.parse_one(f"ALTER SECRET pw AS {quote_string(value)}")),
            redact_secrets(f"{statement}; ALTER SECRET pw AS {quote_string(value)}"),
        ]
    assert not any(value in text or quote_string(value) in text for text in shown)
