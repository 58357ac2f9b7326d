"""What a new user meets in the first hour, in a real pseudo-terminal (pexpect) as a user
meets it: the pager leaves the answer on the screen and skips what fits; `--spark-ui`
prints the web UI's address once Spark is ready (and `\\spark` shows it), an address the
UI answers on; Ctrl-C at any moment of a statement cancels it without a traceback;
`sluice run` says how to get the connection `kafka` a script copied from the REPL names;
SHOW SOURCE STATISTICS of a source not ingested answers at once and starts nothing."""

from __future__ import annotations

import random
import re
import signal
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path

import pexpect
import pytest

from sluice.cli.display import pager_command
from sluice.spark.session import task_progress
from tests.support.terminal import ANSI, environment, free_port, quitting, raw_output, spawn_repl

# Switching to the terminal's alternate screen (xterm's and the older form), which a pager
# leaves on quitting, taking what it showed with it.
ALTERNATE_SCREEN = ("\x1b[?1049h", "\x1b[?47h", "\x1b[?1047h")


def without_pager_settings(**more: str) -> dict[str, str]:
    env = environment(**more)
    for variable in ("PAGER", "PSQL_PAGER", "LESS"):
        if variable not in more:
            env.pop(variable, None)
    return env


def test_the_pager_leaves_the_answer_on_the_screen_and_skips_what_fits(tmp_path: Path) -> None:
    child, _ = spawn_repl(tmp_path, env=without_pager_settings(), dimensions=(14, 60))
    with quitting(child) as term:
        columns = ", ".join(f"c{i:02d} int" for i in range(15))
        assert term.run(f"CREATE TABLE tall ({columns});") == "CREATE TABLE"
        # 18 lines on 14 rows: less, a page at a time; the rest, then quit.
        term.type("SHOW COLUMNS FROM tall;")
        child.expect_exact(" c10  | t        | integer")
        raw = child.before + child.after
        child.send(" ")
        child.expect_exact("(END)")
        raw += child.before + child.after
        child.send("q")
        raw += raw_output(child)
        assert not any(sequence in raw for sequence in ALTERNATE_SCREEN), repr(raw)
        shown = ANSI.sub("", raw).replace("\r\n", "\n")
        for line in [" name | nullable |   type", *(f" c{i:02d}  | t        | integer" for i in range(15)), "(15 rows)"]:
            assert line in shown, (line, shown)

        # Short output, and lines wider than the terminal that fit once wrapped: no pager.
        assert [line.rstrip() for line in term.run("SHOW TABLES;").splitlines()] == [
            " name |  type | source", "------+-------+--------", " tall | table | NULL", "(1 row)"
        ]
        long_name = "x" * 63
        assert term.run(f"CREATE TABLE wide ({long_name} int, y int);") == "CREATE TABLE"
        term.type("SHOW COLUMNS FROM wide;")
        raw = raw_output(child)
        shown = ANSI.sub("", raw).replace("\r\n", "\n")
        assert "(END)" not in shown and not any(s in raw for s in ALTERNATE_SCREEN)
        assert shown.strip("\n").splitlines()[-1] == "(2 rows)" and long_name in shown


def test_the_pager_is_chosen_as_psql_chooses_it(monkeypatch) -> None:
    for variable in ("PAGER", "PSQL_PAGER"):
        monkeypatch.delenv(variable, raising=False)
    assert pager_command() == ["less", "-S", "-X"]
    monkeypatch.setenv("PAGER", "more -d")
    assert pager_command() == ["more", "-d"]
    monkeypatch.setenv("PSQL_PAGER", "less -R")
    assert pager_command() == ["less", "-R"]
    monkeypatch.setenv("PSQL_PAGER", "")  # set empty: no pager at all
    assert pager_command() == []


@pytest.mark.spark  # the REPL it runs starts Spark
def test_spark_ui_is_printed_once_spark_is_ready_at_an_address_it_answers_on(tmp_path: Path) -> None:
    port = free_port()
    child, _ = spawn_repl(tmp_path, "--spark-ui", "--conf", f"spark.ui.port={port}")
    with quitting(child) as term:
        starting = term.run("\\spark")
        assert re.fullmatch(r"spark: starting \(local\[2\]\) for \d+ s", starting), starting
        # Nobody types: the address comes by itself, above the prompt, once Spark runs.
        child.expect(r"Spark UI: (http://[^\s]+)", timeout=300)
        url = child.match.group(1)
        assert url == f"http://127.0.0.1:{port}"
        child.expect_exact("sluice=>")
        status = term.run("\\spark").splitlines()
        assert re.fullmatch(r"spark: running \(local\[2\]\), started in [\d.]+ s", status[0]), status
        assert status[1:] == [f"web UI: {url}"]
        with urllib.request.urlopen(f"{url}/jobs/", timeout=30) as page:
            assert page.status == 200 and b"Spark Jobs" in page.read()
        # Said once: a statement on Spark does not say it again.
        assert term.run("SELECT 1 AS one;").splitlines() == [" one", "-----", "   1", "(1 row)"]


@pytest.mark.spark  # the REPL it runs starts Spark
def test_spark_ui_off_says_how_to_run_it(tmp_path: Path) -> None:
    child, _ = spawn_repl(tmp_path)
    with quitting(child) as term:
        assert term.run("SELECT 2 AS two;", timeout=300).splitlines()[-3:] == ["-----", "   2", "(1 row)"]
        status = term.run("\\spark").splitlines()
        assert status[1:] == ["web UI: off (start sluice with --spark-ui to run it)"], status


@pytest.mark.spark  # the REPL it runs starts Spark
@pytest.mark.long  # twenty statements cancelled on Spark: minutes on two loaded cores
def test_ctrl_c_at_twenty_random_moments_never_prints_a_traceback(tmp_path: Path) -> None:
    from sluice.kafka.embedded import produce

    rng = random.Random(40)
    child, broker = spawn_repl(tmp_path)
    transcript: list[str] = []
    with quitting(child) as term:
        produce(broker, "words", [(None, f"w{i:03d}".encode()) for i in range(300)])
        assert term.run("CREATE SOURCE words FROM KAFKA CONNECTION kafka (TOPIC 'words') FORMAT TEXT;") == "CREATE SOURCE"
        statements = [
            # Spark starting, reading Kafka offsets, planning, running tasks, showing rows: a
            # slow statement cancelled at a random moment of its life.
            "SELECT count(*) FROM words a, words b, words c, words d;",
            "SELECT text FROM words ORDER BY text LIMIT 3;",
            "SELECT count(*) FROM words;",
        ]
        for moment in range(20):
            sql = statements[moment % len(statements)]
            term.type(sql)
            time.sleep(rng.uniform(0, 1.5 if moment else 0.2))  # the first one while Spark starts
            child.sendintr()
            text = ANSI.sub("", raw_output(child, timeout=300))
            transcript.append(f"-- {sql} (Ctrl-C)\n{text}")
            assert "Traceback" not in text and "KeyboardInterrupt" not in text, "\n".join(transcript)
        # The session goes on, and answers.
        assert term.run("SELECT count(*) FROM words;", timeout=300).splitlines()[-2] == "   300"


# Long tier: in a full parallel run a SIGINT of this test reached pytest's own report hook
# twice and ended the run (never when run alone), so it stays out of the default tier.
@pytest.mark.long
def test_a_ctrl_c_inside_a_call_into_the_jvm_is_not_logged_with_its_traceback(spark, caplog) -> None:
    """py4j logs a Ctrl-C that interrupts a call into the JVM (`logging.exception`, the root
    logger: `ERROR:root:KeyboardInterrupt while sending command.` and a traceback on a
    terminal) before letting it go on. The main thread here does nothing but such calls
    (the REPL's progress line makes them), interrupted at twenty random moments."""
    rng = random.Random(4)
    tracker = spark.sparkContext.statusTracker()
    inside_py4j = 0
    # Python's own handler, as in the REPL, whose Spark starts off the main thread (PySpark
    # puts its own in place when its context starts on the main thread, as the fixture's did).
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for _ in range(20):
            interrupt = (threading.main_thread().ident, signal.SIGINT)
            timer = threading.Timer(rng.uniform(0.01, 0.3), signal.pthread_kill, interrupt)
            try:
                timer.start()  # in the try: on a loaded machine the signal may come before the loop
                # Until the interrupt, or for a while: one py4j turns into a broken
                # connection (no count, as the progress line shows) has ended in it.
                until = time.monotonic() + 2
                while time.monotonic() < until:
                    task_progress(None)  # as the progress line looks, on the main thread
                timer.join()  # a loaded machine's late signal lands here, in the try
            except KeyboardInterrupt as e:
                inside_py4j += any("py4j" in frame.filename for frame in traceback.extract_tb(e.__traceback__))
            timer.join()
    finally:
        signal.signal(signal.SIGINT, saved)
    assert inside_py4j >= 10, inside_py4j  # most land in py4j's socket read, the rest between two calls
    assert not [r for r in caplog.records if "KeyboardInterrupt" in r.getMessage()]
    # The JVM still answers (the first call may find the connection the last interrupt
    # broke, as the progress line's next look may: it then shows no task count).
    task_progress(None)
    assert tracker.getActiveStageIds() == []


def test_sluice_run_hints_how_to_get_the_connection_kafka(tmp_path: Path) -> None:
    env = environment()
    env.pop("SLUICE_BROKER", None)
    script = "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT"
    child = pexpect.spawn(
        sys.executable, ["-m", "sluice", "run", "--data-dir", str(tmp_path / "data"), "-c", script],
        env=env, encoding="utf-8", timeout=60,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert child.before.replace("\r\n", "\n").splitlines() == [
        "ERROR:  unknown catalog item 'kafka'",
        f"LINE 1: {script}",
        "                                              ^",
        "HINT:  sluice run creates connection kafka when given a broker: --broker ADDR "
        "(or $SLUICE_BROKER), or --embedded to start one",
    ]


def test_show_source_statistics_of_a_source_not_ingested_answers_at_once(tmp_path: Path) -> None:
    """Without Spark (this test has none): nothing is started, nothing waited for."""
    from sluice.kafka.embedded import produce

    child, broker = spawn_repl(tmp_path)
    with quitting(child) as term:
        produce(broker, "events", [(None, b"a"), (None, b"\xff")])
        assert term.run("CREATE SOURCE ev FROM KAFKA CONNECTION kafka (TOPIC 'events') FORMAT TEXT;") == "CREATE SOURCE"
        began = time.monotonic()
        shown = term.run("SHOW SOURCE STATISTICS;")
        took = time.monotonic() - began
        assert [line.rstrip() for line in shown.splitlines()] == [
            " source | messages_read | errors | dead_lettered | last_error_at |    status    | reason",
            "--------+---------------+--------+---------------+---------------+--------------+--------",
            " ev     |             0 |      0 |             0 | NULL          | not ingested | NULL",
            "(1 row)",
        ]
        assert took < 0.5, took
        assert term.run("\\spark").startswith("spark: ")  # whatever Spark does, SHOW did not wait for it
        assert not (tmp_path / "data" / "streams").exists()  # no stream was started
