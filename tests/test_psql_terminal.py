"""psql's habits, progress and Spark's own tools as a user meets them: the REPL in a real
pseudo-terminal (pexpect) on its embedded Kafka broker and real Spark, then the same
catch-up with piped output, and `sluice run`'s script output."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from sluice.kafka.embedded import EmbeddedKafka, produce
from tests.support.terminal import Terminal, environment, spawn_repl

MESSAGES = 3000


def events() -> list[tuple[bytes | None, bytes | None]]:
    good = [(None, b'{"n": %d}' % i) for i in range(MESSAGES)]
    return good[:10] + [(None, b"{oops")] + good[10:] + [(None, b"not json")]


@pytest.mark.spark  # the REPL it runs starts Spark
def test_psql_habits_progress_and_spark_tools_in_a_terminal(tmp_path: Path) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("# as Spark reads it\nspark.sql.session.timeZone  America/New_York\n")
    data = tmp_path / "data"
    began = time.monotonic()
    # (`--spark-ui` prints the UI's address when Spark is ready, at a moment of its own:
    # tests/test_first_hour.py checks it.)
    child, broker = spawn_repl(
        tmp_path,
        env=environment(PAGER="sed -e s/^/paged:/", SLUICE_SPARK_CONF=str(conf)),
        dimensions=(14, 100),
    )
    try:
        child.expect_exact("sluice=>")
        term = Terminal(child)
        produce(broker, "events", events())

        # Without Spark: the pager, \x, listings, \d, did-you-mean, unsupported functions.
        columns = ", ".join(f"c{i:02d} int" for i in range(15))
        assert term.run(f"CREATE TABLE wide ({columns});") == "CREATE TABLE"
        paged = term.run("SHOW COLUMNS FROM wide;").splitlines()
        assert len(paged) == 18 and all(line.startswith("paged:") for line in paged), paged
        assert paged[2] == "paged: c00  | t        | integer" and paged[-1] == "paged:(15 rows)"
        assert term.run("\\pset pager off") == "Pager usage is off."
        assert term.run("SHOW COLUMNS FROM wide;").splitlines()[-1] == "(15 rows)"
        assert term.run("\\pset pager on") == "Pager usage is on."
        assert term.run("SHOW TABLES;").splitlines()[-1] == "(1 row)"  # fits: not paged
        assert term.run("\\x") == "Expanded display is on."
        assert term.run("SHOW TABLES;").splitlines() == [
            "-[ RECORD 1 ]-", "name   | wide", "type   | table", "source | NULL",
        ]
        assert term.run("\\x auto") == "Expanded display is used automatically."
        assert term.run("\\x off") == "Expanded display is off."

        assert term.run(
            "CREATE SOURCE kept FROM KAFKA CONNECTION kafka (TOPIC 'events') FORMAT JSON\n"
            "  WITH (REDIRECT ERRORS = kept_errors);"
        ) == "CREATE SOURCE"
        assert term.run(
            "CREATE SOURCE raw FROM KAFKA CONNECTION kafka (TOPIC 'events') FORMAT JSON;"
        ) == "CREATE SOURCE"
        assert [line.rstrip() for line in term.run("\\ds").splitlines()[2:4]] == [
            " kept | kafka | EpochMilliseconds | kept_errors", " raw  | kafka | EpochMilliseconds | NULL",
        ]
        assert [line.split("|")[0].strip() for line in term.run("\\dt").splitlines()[2:4]] == [
            "kept_errors", "wide",
        ]
        described = term.run("\\d kept").splitlines()
        assert described[2] == " data | f        | jsonb"
        assert described[4:] == [
            "kafka: topic 'events' via connection kafka",
            "value format: json",
            "envelope: none",
            "errors: redirected to dead-letter table kept_errors",
            "error tolerance: all",
            "retry: transient faults for 60s, waiting at most 10s between attempts",
            "timeline: EpochMilliseconds",
            "counters: none yet (only a source ingested continuously has them: one with a dead-letter "
            "table, or one a materialized view, sink or SUBSCRIBE reads, from the first statement reading it)",
        ]
        assert term.run("SELECT data FROM kept_erors;").splitlines() == [
            "ERROR:  unknown catalog item 'kept_erors'",
            "LINE 1: SELECT data FROM kept_erors;",
            "                         ^",
            'HINT:  did you mean "kept_errors"?',
        ]
        assert term.run("SELECT * FROM generate_series(1, 3);").splitlines()[0] == (
            "ERROR:  function generate_series is not supported"
        )
        assert term.run("\\log") == str(data / "log" / "spark.log")

        # On Spark: its start and the catch-up of a continuously ingested source show
        # progress; then the settings, counters and a HINT on a source's bad message.
        counted = term.run("SELECT count(*) FROM kept;", timeout=300).splitlines()
        assert counted[-3:] == ["-------", f"  {MESSAGES}", "(1 row)"], counted
        assert any(line.startswith("starting Spark…") for line in term.progress), term.progress
        assert any(
            re.fullmatch(rf"catching up: kept \d+/{MESSAGES + 2} offsets( · Spark: \d+/\d+ tasks)? · \d+ s", line)
            for line in term.progress
        ), term.progress
        assert (data / "log" / "spark.log").is_file()
        assert term.run("SELECT current_timezone() AS zone;").splitlines()[2] == " America/New_York"
        statistics = term.run("\\d kept").splitlines()
        counters = [cell.strip() for cell in statistics[-2].split("|")]
        assert counters[:4] + counters[5:] == ["kept", str(MESSAGES + 2), "2", "2", "running", "NULL"], statistics
        failed = term.run("SELECT count(*) FROM raw;", timeout=300).splitlines()
        assert failed[0].startswith("ERROR:  Decode error: Failed to decode JSON"), failed
        assert failed[-1] == (
            "HINT:  FROM IGNORE ERRORS raw reads its rows without the errors, FROM ONLY ERRORS raw "
            "lists them, and WITH (REDIRECT ERRORS = table) on a source sends them to a dead-letter table"
        )
        assert term.run("SELECT nosuchfn(1);").splitlines() == ["ERROR:  function nosuchfn is not supported"]

        child.send("\\q\r")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        if child.isalive():
            child.terminate(force=True)
    print(f"\nterminal session took {time.monotonic() - began:.1f} s")


@pytest.mark.spark  # the REPL it runs starts Spark
def test_piped_output_shows_no_progress_and_csv_is_csv(tmp_path: Path) -> None:
    began = time.monotonic()
    with EmbeddedKafka() as kafka:
        kafka.create_topic("events", 1)
        produce(kafka.bootstrap, "events", events())
        script = (
            "CREATE SOURCE kept FROM KAFKA CONNECTION kafka (TOPIC 'events') FORMAT JSON"
            " WITH (REDIRECT ERRORS = kept_errors);\n"
            "SELECT count(*) AS n, 'a,b' AS quoted FROM kept;\n"
            "SELECT error_code, count(*) FROM kept_errors GROUP BY error_code;\n"
        )
        piped = subprocess.run(
            [sys.executable, "-m", "sluice.cli.main", "repl", "--broker", kafka.bootstrap, "--csv"],
            input=script, capture_output=True, text=True, env=environment(), timeout=600,
        )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == f'n,quoted\n{MESSAGES},"a,b"\nerror_code,count\n22000,2\n', piped.stdout
    assert "\r" not in piped.stdout + piped.stderr and "catching up" not in piped.stderr
    assert "starting Spark…" in piped.stderr  # words about the session go to stderr
    print(f"\npiped session took {time.monotonic() - began:.1f} s")


def test_sluice_run_for_scripts(tmp_path: Path) -> None:
    script = "CREATE TABLE t (a int, \"b,c\" text); SHOW COLUMNS FROM t;"

    def run(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "sluice.cli.main", "run", *flags, "-c", script],
            capture_output=True, text=True, env=environment(), timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("--csv") == 'name,nullable,type\na,t,integer\n"b,c",t,text\n'
    assert run("-A", "-t") == "a|t|integer\nb,c|t|text\n"
    assert run("-A") == "CREATE TABLE\nname|nullable|type\na|t|integer\nb,c|t|text\n(2 rows)\n"
