"""The REPL: its pieces without a terminal, then a whole session driven through a
pseudo-terminal as a user would drive it (real embedded Kafka, real Spark)."""

from __future__ import annotations

import _thread
import io
import re
import signal
import threading
import time
from pathlib import Path

import pexpect
import pytest

from sluice.cli.interrupt import Cancelled, stream_rows
from sluice.cli.repl import Repl
from sluice.cli.repl_input import Accumulator, MetaCommand, candidates, is_complete, parse_meta
from sluice.cli.spark_starter import SparkStarter
from sluice.cli.table import result_text
from sluice.errors import SqlError
from sluice.session import Session
from sluice.syntax import parse_one
from tests.support.terminal import PROMPT_ENDED, Terminal, cancelled, spawn_repl


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "SELECT 1;",
        "SELECT 1;  ",
        "SELECT 1; -- done",
        "SELECT 1;\nSELECT 2;",
        "SELECT ';' ;",
        "SELECT $$a;b$$;",
        "\\d orders",
        "  \\q",
        "-- just a comment",
    ],
)
def test_complete_input_runs_on_enter(text: str) -> None:
    assert is_complete(text)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "SELECT 1;\nSELECT 2",
        "SELECT ';",
        "SELECT 'a;' ",
        'SELECT "x;',
        "SELECT /* ; */ 1",
        "SELECT 1 /* unterminated ;",
        "SELECT $$;",
        "SELECT 1 -- ;",
    ],
)
def test_incomplete_input_continues_on_the_next_line(text: str) -> None:
    assert not is_complete(text)


def test_accumulator_collects_statements_and_meta_commands() -> None:
    pending = Accumulator()
    fed = [
        pending.feed(line)
        for line in ["\\timing", "SELECT 1,", "  'a;b'", "FROM t;", "", "  \\d t  ", "SHOW SOURCES; SHOW"]
    ]
    assert fed == [
        "\\timing",
        None,
        None,
        "SELECT 1,\n  'a;b'\nFROM t;",
        None,
        "\\d t",
        None,
    ]
    assert pending.pending == "SHOW SOURCES; SHOW"
    assert pending.feed(" VIEWS;") == "SHOW SOURCES; SHOW\n VIEWS;"


def test_a_backslash_inside_a_statement_is_part_of_it() -> None:
    pending = Accumulator()
    assert pending.feed("SELECT 'a") is None
    assert pending.feed("\\d';") == "SELECT 'a\n\\d';"


@pytest.mark.parametrize(
    "line, expected",
    [
        ("\\q", MetaCommand("q", "")),
        ("\\d", MetaCommand("d", "")),
        ("  \\d   orders  ", MetaCommand("d", "orders")),
        ('\\d "My Table"', MetaCommand("d", '"My Table"')),
        ("\\timing off", MetaCommand("timing", "off")),
        ("\\i ~/scripts/set up.sql", MetaCommand("i", "~/scripts/set up.sql")),
        ("\\?", MetaCommand("?", "")),
    ],
)
def test_meta_command_parsing(line: str, expected: MetaCommand) -> None:
    assert parse_meta(line) == expected


def test_completion_of_keywords_follows_the_case_typed() -> None:
    word, found = candidates("SEL", [])
    assert word == "SEL" and "SELECT" in found
    word, found = candidates("create mat", [])
    assert word == "mat" and found == ["materialized"]
    assert candidates("SELECT ", [])[1] == []


def test_completion_offers_catalog_names_before_keywords() -> None:
    word, found = candidates("SELECT * FROM or", ["orders", "orders_dlq", "clicks"])
    assert word == "or"
    assert found[:2] == ["orders", "orders_dlq"]
    assert "order" in found and "clicks" not in found


def test_completion_of_meta_commands() -> None:
    assert candidates("\\ti", ["timely"]) == ("\\ti", ["\\timing"])
    assert candidates("\\", [])[1] == [
        "\\d", "\\dt", "\\dv", "\\dm", "\\ds", "\\x", "\\pset", "\\timing", "\\i", "\\kafka", "\\log", "\\spark",
        "\\produce", "\\topics", "\\?", "\\q",
    ]
    assert candidates("\\d ord", ["orders"]) == ("ord", ["orders"])


@pytest.mark.parametrize(
    "sql, spark",
    [
        ("CREATE TABLE t2 (a int)", False),
        ("CREATE VIEW v AS SELECT a FROM t", False),
        ("CREATE MATERIALIZED VIEW mv AS SELECT a FROM t", True),
        ("DROP TABLE t", False),
        ("SHOW TABLES", False),
        ("EXPLAIN SELECT a FROM t", False),
        ("SELECT a FROM t", True),
        ("INSERT INTO t VALUES (1)", True),
        ("SUBSCRIBE t", True),
    ],
)
def test_which_statements_wait_for_spark(tmp_path: Path, sql: str, spark: bool) -> None:
    with Session(tmp_path, check_kafka=False) as session:
        session.execute("CREATE TABLE t (a int)")
        assert session.needs_spark(session.plan(parse_one(sql))) is spark


class NoSpark(SparkStarter):
    """A Spark that must never be asked for: statements in these tests need none."""

    def __init__(self) -> None:
        super().__init__(self.start)

    def start(self) -> None:
        raise AssertionError("a statement that needs no Spark waited for it")


def shell(tmp_path: Path, spark: SparkStarter | None = None) -> tuple[Repl, io.StringIO]:
    out = io.StringIO()
    session = Session(tmp_path / "data", check_kafka=False)
    return Repl(session, "127.0.0.1:9", embedded=True, spark=spark or NoSpark(), out=out), out


def test_statements_meta_commands_and_errors_without_spark(tmp_path: Path) -> None:
    repl, out = shell(tmp_path)
    assert repl.handle("CREATE TABLE t (a int, b text);\nSHOW TABLES;")
    assert repl.handle("\\d")
    assert repl.handle("\\d t")
    assert repl.handle("\\d nope")
    assert repl.handle("SELECT a\nFROM nope;")
    assert repl.handle("\\kafka")
    assert repl.handle("\\frob")
    assert repl.handle("EXPLAIN SELECT a FROM t;")
    show = repl.session.execute
    assert out.getvalue().startswith(
        "CREATE TABLE\n"
        + result_text(show("SHOW TABLES")) + "\n"
        + "List of relations\n"
        " name |  type\n"
        "------+-------\n"
        " t    | table\n"
        "(1 row)\n"
        + result_text(show("SHOW COLUMNS FROM t")) + "\n"
        + "timeline: EpochMilliseconds\n"
        + "ERROR:  unknown catalog item 'nope'\n"
        "ERROR:  unknown catalog item 'nope'\n"
        "LINE 2: FROM nope;\n"
        "             ^\n"
        "127.0.0.1:9\n"
        "invalid command \\frob; try \\? for help\n"
    )
    assert out.getvalue().endswith(result_text(show("EXPLAIN SELECT a FROM t")) + "\n")
    assert "Traceback" not in out.getvalue()
    assert not repl.handle("\\q")


def test_timing_and_scripts(tmp_path: Path) -> None:
    repl, out = shell(tmp_path)
    script = tmp_path / "setup.sql"
    script.write_text("CREATE TABLE t (a int);\n\nSHOW COLUMNS FROM nope;\nDROP TABLE t;\n")
    repl.handle("\\timing")
    repl.handle(f"\\i {script}")
    repl.handle("\\timing off")
    repl.handle(f"\\i {tmp_path / 'missing.sql'}")
    repl.handle("\\timing maybe")
    lines = out.getvalue().splitlines()
    assert lines[0] == "Timing is on."
    assert lines[1] == "CREATE TABLE"
    assert re.fullmatch(r"Time: \d+\.\d{3} ms", lines[2])
    # an error in a script names the script's line, and the script goes on
    assert lines[3:6] == ["ERROR:  unknown catalog item 'nope'", "LINE 3: SHOW COLUMNS FROM nope;", " " * 26 + "^"]
    assert re.fullmatch(r"Time: \d+\.\d{3} ms", lines[6])
    assert lines[7] == "DROP TABLE"
    assert lines[9:] == [
        "Timing is off.",
        f"\\i: cannot read {tmp_path / 'missing.sql'}: No such file or directory",
        '\\timing: unrecognized value "maybe"; expected on or off',
    ]


class FakeSubscription:
    """The shape of `Session.subscribe`'s result: columns, rows as they come, `close()`."""

    columns = ("mz_timestamp", "mz_diff", "key", "flag")

    def __init__(self, rows, *, then: str = "block") -> None:
        self.rows = rows
        self.then = then
        self.closed = threading.Event()

    def __iter__(self):
        yield from self.rows
        if self.then == "fail":
            raise SqlError("Decode error: Failed to decode UTF-8 (original bytes: \"ff\")")
        if self.then == "block":
            self.closed.wait()

    def close(self) -> None:
        self.closed.set()


@pytest.fixture
def ctrl_c_handled():
    """Ctrl-C as Python delivers it, even when this process started with SIGINT ignored
    (a background job of a non-interactive shell), where `interrupt_main` does nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_subscribe_rows_print_until_ctrl_c_closes_the_subscription(ctrl_c_handled) -> None:
    lines: list[str] = []
    subscription = FakeSubscription([(1700000000000, 1, "a", True), (1700000000001, -1, None, False)])

    def interrupt_when_printed() -> None:
        deadline = time.monotonic() + 10
        while len(lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_printed, daemon=True).start()
    with pytest.raises(Cancelled):
        stream_rows(subscription, lines.append)
    assert subscription.closed.is_set()
    assert lines == [
        "mz_timestamp\tmz_diff\tkey\tflag",
        "1700000000000\t1\ta\ttrue",
        "1700000000001\t-1\tNULL\tfalse",
    ]


def test_subscribe_errors_and_ends_close_the_subscription() -> None:
    failing = FakeSubscription([(1, 1, "a", True)], then="fail")
    lines: list[str] = []
    with pytest.raises(SqlError, match="Decode error"):
        stream_rows(failing, lines.append)
    assert failing.closed.is_set() and len(lines) == 2
    ending = FakeSubscription([], then="end")
    stream_rows(ending, lines.append)
    assert ending.closed.is_set()


class SubscribingSession(Session):
    def subscribe(self, sql: str) -> FakeSubscription:
        self.subscribed = sql
        return FakeSubscription([(5, 1, "k", True)], then="fail")


def test_the_repl_hands_subscribe_to_session_subscribe(tmp_path: Path) -> None:
    out = io.StringIO()
    session = SubscribingSession(tmp_path / "data", check_kafka=False)
    repl = Repl(session, "127.0.0.1:9", embedded=True, spark=SparkStarter(lambda: None), out=out)
    repl.handle("CREATE TABLE t (k text, flag bool);")
    repl.handle("SHOW TABLES;\n  SUBSCRIBE t;")
    assert session.subscribed == "SUBSCRIBE t"
    assert out.getvalue().splitlines()[-3:] == [
        "mz_timestamp\tmz_diff\tkey\tflag",
        "5\t1\tk\ttrue",
        'ERROR:  Decode error: Failed to decode UTF-8 (original bytes: "ff")',
    ]


def test_a_failed_spark_start_is_an_error_and_is_retried(tmp_path: Path) -> None:
    attempts = []

    def no_java():
        attempts.append(1)
        raise RuntimeError("Java gateway process exited before sending its port number")

    repl, out = shell(tmp_path, SparkStarter(no_java))
    repl.handle("CREATE TABLE t (a int);")
    repl.handle("SELECT a FROM t;")
    repl.handle("SELECT a FROM t;")
    text = out.getvalue()
    assert text.count(
        "ERROR:  cannot start spark: Java gateway process exited before sending its port number"
    ) == 2
    assert len(attempts) == 2 and "Traceback" not in text


@pytest.mark.spark  # the REPL it runs starts Spark
def test_a_user_session_in_a_terminal(tmp_path: Path) -> None:
    from sluice.kafka.embedded import produce

    history = tmp_path / "history"
    began = time.monotonic()
    child, broker = spawn_repl(tmp_path)
    try:
        child.expect_exact("sluice=>")
        prompt_after = time.monotonic() - began
        print(f"\nprompt after {prompt_after:.2f} s")
        assert prompt_after < 10
        term = Terminal(child)

        assert term.run("\\kafka") == broker
        produce(broker, "words", [(None, f"w{i:03d}".encode()) for i in range(200)])

        # DDL, SHOW and \d do not wait for Spark, which is still starting
        started = time.monotonic()
        created = term.run("CREATE SOURCE words\n  FROM KAFKA CONNECTION kafka (TOPIC 'words')\n  FORMAT TEXT;")
        assert created == "CREATE SOURCE"
        assert term.run("\\d").splitlines()[-2:] == [" words | source", "(1 row)"]
        assert term.run("\\d words").splitlines()[2] == " text | f        | text"
        assert time.monotonic() - started < 10

        assert term.run("SELEC text FROM words;").splitlines() == [
            'ERROR:  Expected a keyword at the beginning of a statement, found identifier "SELEC"',
            "LINE 1: SELEC text FROM words;",
            "        ^",
        ]
        assert term.run("SELECT text\nFROM nowhere;").splitlines() == [
            "ERROR:  unknown catalog item 'nowhere'",
            "LINE 2: FROM nowhere;",
            "             ^",
        ]

        assert term.run("\\timing") == "Timing is on."
        started = time.monotonic()
        counted = term.run("SELECT count(*) FROM words;")
        first_query = time.monotonic() - started
        assert any(line.startswith("starting Spark…") for line in term.progress), term.progress
        ready = re.search(r"Spark is ready \(started in ([\d.]+) s\)", counted)
        assert ready, counted
        assert counted.splitlines()[-4:-1] == ["-------", "   200", "(1 row)"]
        assert re.fullmatch(r"Time: \d+\.\d{3} ms", counted.splitlines()[-1])
        print(f"spark ready after {ready.group(1)} s; first query answered after {first_query:.1f} s")

        term.type("SELECT count(*) FROM words a, words b, words c, words d, words e;")
        time.sleep(3)
        child.sendintr()
        assert cancelled(term.output(timeout=30))
        started = time.monotonic()
        rows = term.run("SELECT text FROM words ORDER BY text LIMIT 2;")
        print(f"a query after the cancel took {time.monotonic() - started:.1f} s")
        assert rows.splitlines()[2:5] == [" w000", " w001", "(2 rows)"]
        assert term.run("\\timing off") == "Timing is off."

        # Ctrl-C at the prompt clears the line and nothing runs
        child.send("SELECT nonsense")
        child.sendintr()
        child.expect_exact(PROMPT_ENDED)
        assert term.output() == ""
        assert term.run("\\kafka") == broker

        subscribing = hasattr(Session, "subscribe")
        term.type("SUBSCRIBE words;")
        if subscribing:
            child.expect_exact("w199")
            produce(broker, "words", [(None, b"late")])
            child.expect(r"\d+\t1\tlate")
            child.sendintr()
            assert cancelled(term.output(timeout=30))
            assert term.run("SELECT count(*) FROM words;").splitlines()[2] == "   201"
        else:
            assert "ERROR:  executing SUBSCRIBE is not implemented yet" in term.output()

        child.send("\\q\r")
        child.expect(pexpect.EOF, timeout=30)
        child.wait()
        assert child.exitstatus == 0
    finally:
        if child.isalive():
            child.terminate(force=True)
    assert "SELECT count(*) FROM words;" in history.read_text(encoding="utf-8")
    print(f"session took {time.monotonic() - began:.1f} s")
    if not subscribing:
        pytest.xfail("Session.subscribe is not on this branch yet: SUBSCRIBE was refused")
