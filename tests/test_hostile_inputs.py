"""Hostile input never reaches a user as a traceback (issue 14, part 6).

Every entry point — `sluice.parse`, `Session.plan/execute`, `sluice run` (a real
subprocess), `sluice parse`/`plan`/`test` and the piped REPL — answers deep nesting of
every construct, arbitrary text, corrupt files and malformed schema-registry answers with
a `SqlError` carrying a SQLSTATE: 54001 for a statement nested too deeply, XX000 only for
a bug (none here). Statements that once crashed are kept as regression cases.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.errors import InternalError, StatementTooComplex, as_sql_error, user_errors
from tests.support.hostile_inputs import (
    BRACKETED,
    CHAINS,
    CORRUPT_CATALOGS,
    DEPTHS,
    MALFORMED_REGISTRY_ANSWERS,
    MAX_NESTING,
    REGRESSIONS,
    SETUP,
    HostileRegistry,
    hostile_statements,
    is_answer,
    outcome,
)
from tests.test_parse_robustness import _QUERY_WORDS, sqlish_text

SLUICE = [sys.executable, "-m", "sluice.cli.main"]
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def planner():
    """A session that plans without Kafka (or Spark), over table `t`."""
    with sluice.Session(check_kafka=False) as session:
        session.execute(SETUP)
        yield session


# ---------------------------------------------------------------- the one translation


def test_a_python_error_is_an_internal_error_naming_it() -> None:
    error = as_sql_error(AttributeError("'NoneType' object has no attribute 'meta'"))
    assert isinstance(error, InternalError) and error.code == "XX000"
    assert error.detail == "AttributeError: 'NoneType' object has no attribute 'meta'"
    assert sluice.format_error(error).splitlines()[:2] == [
        "ERROR:  internal error",
        "DETAIL:  AttributeError: 'NoneType' object has no attribute 'meta'",
    ]


def test_recursion_and_bad_bytes_have_their_sqlstates() -> None:
    assert as_sql_error(RecursionError()).code == "54001"
    assert as_sql_error(RecursionError()).message == "stack depth limit exceeded"
    decoded = as_sql_error(UnicodeDecodeError("utf-8", b"a\xff", 1, 2, "invalid start byte"))
    assert (decoded.code, decoded.message) == ("22021", 'invalid byte sequence for encoding "UTF8": 0xff')


def test_an_entry_point_passes_sql_errors_iteration_ends_and_interrupts() -> None:
    raised = iter([StopIteration(), KeyboardInterrupt(), StatementTooComplex("x"), KeyError("k")])

    @user_errors
    def __next__():
        raise next(raised)

    for expected in (StopIteration, KeyboardInterrupt, StatementTooComplex, InternalError):
        with pytest.raises(expected):
            __next__()


def test_a_stop_iteration_from_anything_but_next_is_an_internal_error() -> None:
    @user_errors
    def execute():
        return next(item for item in () if item)

    with pytest.raises(InternalError) as raised:
        execute()
    assert (raised.value.code, raised.value.detail) == ("XX000", "StopIteration")


# ---------------------------------------------------------------- deep nesting


@pytest.mark.parametrize("name", sorted(BRACKETED))
def test_nesting_up_to_the_limit_parses_and_beyond_is_54001_with_a_caret(name) -> None:
    build = BRACKETED[name]
    assert outcome(sluice.parse, build(MAX_NESTING)) == "ok"
    for depth in DEPTHS[1:]:
        text = build(depth)
        with pytest.raises(StatementTooComplex) as raised:
            sluice.parse(text)
        error = raised.value
        assert error.code == "54001" and error.message == "stack depth limit exceeded"
        assert error.detail == f"parentheses, brackets and CASE expressions nest more than {MAX_NESTING} deep"
        # The caret is on the first bracket (or CASE) too many.
        assert text[error.span.start] in "([" or text[error.span.start :].startswith("CASE")
        assert "^" in sluice.format_error(error, text)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chains_of_any_length_are_answered(name) -> None:
    for depth in DEPTHS:
        result = outcome(sluice.parse, CHAINS[name](depth))
        assert result in ("ok", "54001"), (name, depth, result)


@pytest.mark.parametrize(("label", "text"), hostile_statements(DEPTHS[:3]), ids=lambda v: v[:60])
def test_session_plans_hostile_statements_or_says_why(planner, label, text) -> None:
    # 10,000-long chains are left out here: planning them is slow (sqlglot's scope
    # analysis is quadratic in a chain's length), not wrong.
    result = outcome(lambda sql: planner.plan(sluice.parse_one(sql)), text)
    assert is_answer(result), (label, result)


def test_queries_at_the_nesting_limit_run_on_spark(spark) -> None:
    """What the parser takes, Spark runs (or sluice refuses as unsupported, 0A000)."""
    with sluice.Session(check_kafka=False) as session:
        session.execute(SETUP)
        session.execute("""INSERT INTO t VALUES (1, '{"k": {"k": 1}}', 'x')""")
        answers = {name: outcome(session.execute, build(MAX_NESTING)) for name, build in BRACKETED.items()}
    assert all(a in ("ok", "0A000") for a in answers.values()), answers
    assert sum(a == "ok" for a in answers.values()) >= len(answers) - 3, answers


# ---------------------------------------------------------------- regressions


def test_from_first_delete_is_a_syntax_error_with_a_caret() -> None:
    # Was: sqlglot read `FROM x` as DuckDB's `SELECT * FROM x`, and planning the DELETE
    # raised AttributeError ('NoneType' object has no attribute 'meta').
    text = "DELETE FROM FROM x"
    with pytest.raises(sluice.ParseError) as raised:
        sluice.parse(text)
    assert sluice.format_error(raised.value, text) == (
        "ERROR:  Expected table name, found FROM\nLINE 1: DELETE FROM FROM x\n                    ^"
    )


@pytest.mark.parametrize(("label", "text"), list(REGRESSIONS.items()), ids=list(REGRESSIONS))
def test_write_clauses_sluice_would_drop_are_refused(planner, label, text) -> None:
    assert outcome(lambda sql: planner.plan(sluice.parse_one(sql)), text) in ("42601", "0A000")


@pytest.mark.parametrize(
    "text",
    ["SELECT " + "abs(" * 24 + "1" + ")" * 24, "SELECT " + "ARRAY[" * 24 + "1" + "]" * 24],
    ids=["nested calls", "nested arrays"],
)
def test_nested_calls_and_arrays_parse_in_linear_time(text) -> None:
    # Were 2^depth: each level parsed as a lambda argument (or a type) first, then again.
    import time

    started = time.perf_counter()
    sluice.parse(text)
    assert time.perf_counter() - started < 2.0


# ---------------------------------------------------------------- arbitrary text


@FAST
@given(st.one_of(st.text(), sqlish_text, st.lists(st.sampled_from(_QUERY_WORDS), max_size=14).map(" ".join)))
def test_arbitrary_text_through_the_session_is_answered(text) -> None:
    with sluice.Session(check_kafka=False) as session:
        session.execute(SETUP)
        result = outcome(lambda sql: session.plan(sluice.parse_one(sql)), text)
    assert is_answer(result), result


# ---------------------------------------------------------------- files and registries


def test_a_catalog_that_is_not_utf8_or_nests_too_deeply_is_corrupt(tmp_path) -> None:
    for name, content in CORRUPT_CATALOGS.items():
        data_dir = tmp_path / name
        data_dir.mkdir()
        (data_dir / "catalog.json").write_bytes(content)
        assert outcome(sluice.Session, str(data_dir)) == "XX001", name
        assert (data_dir / "catalog.json").read_bytes() == content  # left as it was


def test_malformed_registry_answers_are_errors_not_tracebacks() -> None:
    registry = HostileRegistry()
    try:
        with sluice.Session(check_kafka=False) as session:
            session.execute(f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
            session.execute("CREATE CONNECTION k TO KAFKA (BROKER '127.0.0.1:1')")
            create = "CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr"
            answers = {}
            for body in MALFORMED_REGISTRY_ANSWERS:
                registry.body = body
                answers[body[:40]] = outcome(session.execute, create)
    finally:
        registry.server.shutdown()
    assert all(is_answer(a) and a != "ok" for a in answers.values()), answers


def test_a_connection_configuration_librdkafka_refuses_is_an_error(kafka) -> None:
    kafka.create_topic("t", 1)
    create = (
        f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}', SECURITY PROTOCOL = SSL, "
        "SSL CERTIFICATE AUTHORITY = 'not a certificate')"
    )
    with sluice.Session() as session:
        with pytest.raises(sluice.SqlError) as validated:  # validating it makes a client
            session.execute(create)
        session.execute(create + " WITH (VALIDATE = false)")
        with pytest.raises(sluice.SqlError) as raised:
            session.execute("CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT")
    for error in (validated.value, raised.value):
        assert not isinstance(error, InternalError)
        assert "invalid connection configuration" in error.message


# ---------------------------------------------------------------- the command line


def _sluice(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SLUICE, *args], input=stdin, capture_output=True, timeout=300)


def _refused_before_spark() -> list[str]:
    """Hostile statements the CLI answers without Spark: every one is an error."""
    too_deep = [BRACKETED[name](depth) for name in BRACKETED for depth in DEPTHS[1:]]
    return too_deep + [REGRESSIONS["FROM-first DELETE (planner AttributeError)"], "DELETE FROM (SELECT 1)"]


def test_sluice_run_prints_errors_never_tracebacks(tmp_path) -> None:
    statements = _refused_before_spark()
    script = tmp_path / "hostile.sql"
    script.write_text(";\n".join(statements) + ";\n")
    run = _sluice("run", "--keep-going", str(script))
    stderr = run.stderr.decode()
    assert run.returncode == 1
    assert "Traceback" not in stderr
    assert stderr.count("ERROR:  ") == len(statements)
    assert stderr.count("ERROR:  stack depth limit exceeded") == len(statements) - 2

    one = _sluice("run", "-c", "DELETE FROM FROM x")
    assert (one.returncode, one.stdout) == (1, b"")
    assert one.stderr.decode().splitlines() == [
        "ERROR:  Expected table name, found FROM",
        "LINE 1: DELETE FROM FROM x",
        "                    ^",
    ]


def test_the_other_commands_print_errors_never_tracebacks(tmp_path) -> None:
    script = tmp_path / "hostile.sql"
    script.write_text("SELECT " + "(" * 3000 + "1" + ")" * 3000 + ";\n")
    not_utf8 = tmp_path / "bytes.sql"
    not_utf8.write_bytes(b"SELECT 1;\xff\n")
    bad_catalog = tmp_path / "data"
    bad_catalog.mkdir()
    (bad_catalog / "catalog.json").write_bytes(b"\xff")
    slt = tmp_path / "hostile.slt"
    slt.write_text(
        "".join(f"statement error\n{s}\n\n" for s in _refused_before_spark()[:5])
        + "statement error stack depth limit exceeded\nSELECT " + "NOT " * 3000 + "true\n"
    )
    runs = {
        "parse": _sluice("parse", str(script)),
        "plan": _sluice("plan", str(script)),
        "run, not UTF-8": _sluice("run", str(not_utf8)),
        "run, corrupt catalog": _sluice("run", "--data-dir", str(bad_catalog), "-c", "SHOW SOURCES"),
        "repl, piped": _sluice("repl", stdin=script.read_bytes() + b"\\i " + bytes(not_utf8) + b"\n"),
        "test": _sluice("test", str(slt)),
    }
    for name, run in runs.items():
        assert b"Traceback" not in run.stderr + run.stdout, name
    for name in ("parse", "plan", "run, not UTF-8", "run, corrupt catalog"):
        assert runs[name].returncode == 1 and runs[name].stderr.startswith(b"ERROR:  "), name
    assert b'ERROR:  invalid byte sequence for encoding "UTF8": 0xff' in runs["run, not UTF-8"].stderr
    assert runs["repl, piped"].stdout.count(b"ERROR:  ") == 2
    assert runs["test"].returncode == 0 and b"6 passed, 0 failed" in runs["test"].stdout
