"""psql's habits without a terminal or Spark: expanded records, CSV and unaligned output,
widths by display cells, the progress line's text, Spark settings files, did-you-mean
HINTs and functions named as unsupported."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.cli.display import Display, csv_text, expanded_text
from sluice.cli.progress import ProgressLine, progress_text
from sluice.cli.table import cells, format_table
from sluice.errors import SqlError
from sluice.session import Progress, Session
from sluice.spark.settings import SparkSettings, conf_pairs, read_conf_file
from sluice.spark.settings import running as spark_running


@dataclass
class Shown:  # what `Display.result` needs of a `Result`
    status: str
    columns: tuple = ()
    rows: list = ()
    notice: str | None = None


def test_expanded_records_as_psql_draws_them() -> None:
    assert expanded_text(("a", "b"), [(1, "x")]).splitlines() == ["-[ RECORD 1 ]", "a | 1", "b | x"]
    long = expanded_text(("name", "error"), [("s", "Decode error: bad"), ("t", None)])
    assert long.splitlines() == [
        "-[ RECORD 1 ]------------",
        "name  | s",
        "error | Decode error: bad",
        "-[ RECORD 2 ]------------",
        "name  | t",
        "error | NULL",
    ]
    wide_names = expanded_text(("a_rather_long_name",), [(1,)])
    assert wide_names.splitlines()[0] == "-[ RECORD 1 ]------+--"
    assert expanded_text(("a",), []) == "(0 rows)"


def test_expanded_auto_only_when_the_table_is_wider_than_the_terminal() -> None:
    result = Shown("SELECT", ("k", "v"), [(1, "x" * 30)])
    auto = Display(expanded="auto")
    assert auto.result(result, width=80).splitlines()[-1] == "(1 row)"
    assert auto.result(result, width=20).splitlines()[0] == "-[ RECORD 1 ]---------------------"
    assert auto.result(result, width=None).splitlines()[-1] == "(1 row)"  # not a terminal


def test_csv_and_unaligned_output_for_scripts() -> None:
    result = Shown("SELECT", ("a", "b,c"), [(1, 'say "hi"'), (None, "")])
    assert Display(format="csv").result(result) == 'a,"b,c"\n1,"say ""hi"""\n,'
    assert Display(format="csv", tuples_only=True).result(result) == '1,"say ""hi"""\n,'
    assert Display(format="unaligned").result(result) == 'a|b,c\n1|say "hi"\nNULL|\n(2 rows)'
    assert Display(format="unaligned", tuples_only=True).result(result) == '1|say "hi"\nNULL|'
    # a command's tag is for people: scripts reading CSV or rows alone do not get it
    assert Display(format="csv").result(Shown("CREATE TABLE")) == ""
    assert Display(format="unaligned", tuples_only=True).result(Shown("CREATE TABLE")) == ""
    assert Display(format="unaligned").result(Shown("CREATE TABLE")) == "CREATE TABLE"


texts = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=8)
cell_texts = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="|+"), max_size=8)


@given(st.lists(st.tuples(texts, st.one_of(st.none(), texts, st.integers())), max_size=6))
def test_csv_reads_back_as_written(rows: list) -> None:
    text = csv_text(("a", "b"), rows)
    read = list(csv.reader(io.StringIO(text)))
    expected = [["a", "b"]] + [["" if v is None else str(v) for v in row] for row in rows]
    assert read == expected


@given(st.lists(st.tuples(cell_texts, cell_texts), min_size=1, max_size=5))
def test_table_columns_line_up_in_display_cells(rows: list) -> None:
    """Wide (CJK) and zero-width characters included, every row of a table takes as many
    terminal cells as its header, and each column's `|` sits at the same cell."""
    lines = format_table(("name", "値"), rows).splitlines()[:-1]
    assert len({cells(line) for line in lines[:1] + lines[2:]}) == 1
    bars = {cells(line[: line.index("|" if "|" in line else "+")]) for line in lines}
    assert len(bars) == 1


def test_wide_characters_take_two_cells() -> None:
    assert format_table(("t",), [("日本",), ("ab",)]).splitlines() == [
        "  t  ",
        "------",
        " 日本",
        " ab  ",
        "(2 rows)",
    ]


def test_progress_text() -> None:
    assert progress_text(Progress(), 3.7) == "running… · 3 s"
    both = Progress((("orders", 120, 500), ("clicks", 0, 9)), (3, 8))
    assert progress_text(both, 4.2) == "catching up: orders 120/500 offsets, clicks 0/9 offsets · Spark: 3/8 tasks · 4 s"


def test_a_progress_line_is_never_drawn_where_output_is_not_a_terminal() -> None:
    out = io.StringIO()
    line = ProgressLine(out, lambda waited: "busy", delay=0)
    line.tick()
    line.clear()
    assert out.getvalue() == ""


def test_spark_settings_files_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "spark.conf"
    conf.write_text(
        "# a comment\n! another\n\nspark.ui.port   4050\nspark.a=b=c\nspark.b: x y\n"
        "spark.driver.extraJavaOptions -Dx=y\n"
    )
    assert read_conf_file(conf) == [
        ("spark.ui.port", "4050"),
        ("spark.a", "b=c"),
        ("spark.b", "x y"),
        ("spark.driver.extraJavaOptions", "-Dx=y"),
    ]
    monkeypatch.setenv("SLUICE_SPARK_CONF", str(conf))
    pairs = conf_pairs(SparkSettings(conf=(("spark.ui.port", "4060"),)))
    assert pairs[0] == ("spark.ui.port", "4050") and pairs[-1] == ("spark.ui.port", "4060")  # flags win
    conf.write_text("spark.ui.port 1\nspark.lonely\n")
    with pytest.raises(SqlError) as bad:
        read_conf_file(conf)
    assert (bad.value.code, bad.value.message) == (
        "22023", f'invalid line 2 in SLUICE_SPARK_CONF file "{conf}": spark.lonely'
    )
    with pytest.raises(SqlError, match="cannot read SLUICE_SPARK_CONF file"):
        read_conf_file(tmp_path / "missing.conf")


def test_spark_log_lives_under_a_kept_data_directory(tmp_path: Path) -> None:
    with Session(tmp_path / "data", check_kafka=False) as session:
        log = session.spark_log()
        if spark_running():  # started by an earlier test of this process, its log elsewhere
            assert log.name == "spark.log" and log.exists()
        else:
            assert log == tmp_path / "data" / "log" / "spark.log"
    with Session(check_kafka=False) as session:
        if not spark_running():  # a temporary data directory: a log directory of its own
            log = session.spark_log()
            assert log.name == "spark.log" and not log.is_relative_to(session.data_dir)


def failure(session: Session, sql: str) -> SqlError:
    with pytest.raises(SqlError) as failed:
        session.execute(sql)
    return failed.value


def test_did_you_mean_and_unsupported_functions(tmp_path: Path) -> None:
    with Session(tmp_path / "data", check_kafka=False) as session:
        session.execute_script(
            "CREATE TABLE orders (amount int, customer text); CREATE TABLE other (z int);"
        )
        unknown = failure(session, "SELECT amount FROM ordrs")
        assert (unknown.code, unknown.message, unknown.hint) == (
            "42704", "unknown catalog item 'ordrs'", 'did you mean "orders"?'
        )
        column = failure(session, "SELECT o.amout FROM orders o, other")
        assert (column.code, column.message, column.hint) == (
            "42703", 'column "o.amout" does not exist', 'did you mean "amount"?'
        )
        assert failure(session, "SELECT custmer FROM orders").hint == 'did you mean "customer"?'
        assert failure(session, "SELECT zebra FROM orders").hint is None
        assert failure(session, "DROP TABLE ordrs").hint == 'did you mean "orders"?'
        assert failure(session, "SHOW COLUMNS FROM orderz").hint == 'did you mean "orders"?'
        for sql in ("SELECT * FROM generate_series(1, 3)", "SELECT generate_series(3, 1)"):
            refused = failure(session, sql)
            assert (refused.code, refused.message) == ("0A000", "function generate_series is not supported")
            assert sql[refused.span.start : refused.span.end].startswith("generate_series")


def test_describe_a_source_without_spark(tmp_path: Path) -> None:
    with Session(tmp_path / "data", check_kafka=False) as session:
        session.execute_script(
            "CREATE CONNECTION k TO KAFKA (BROKER 'localhost:9');"
            "CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT JSON"
            " ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE) WITH (REDIRECT ERRORS = dlq, TIMELINE = 'x');"
        )
        assert session.describe("s") == [
            "kafka: topic 't' via connection k",
            "key format: text",
            "value format: json",
            "envelope: upsert",
            "value decoding errors: inline as error",
            "errors: redirected to dead-letter table dlq",
            "error tolerance: all",
            "retry: transient faults for 60s, waiting at most 10s between attempts",
            "timeline: User(x)",
        ]
        assert session.describe("dlq") == ["errors of source s", "timeline: User(x)"]
        assert session.ingested("s") is False and session.ingested("dlq") is None
        assert failure(session, "SHOW COLUMNS FROM nope").code == "42704"


def test_completion_offers_the_columns_of_the_relations_read() -> None:
    from sluice.cli.repl_input import candidates

    columns = {"orders": ("amount", "customer"), "clicks": ("url", "at")}
    names = list(columns)
    assert candidates("SELECT a", names, columns, "SELECT a FROM orders;")[1][:2] == ["amount", "all"]
    assert candidates("SELECT a", names, columns)[1][:2] == ["amount", "at"]  # no FROM yet: all
    where = "SELECT * FROM IGNORE ERRORS clicks WHERE u"
    assert candidates(where, names, columns)[1][0] == "url"
    assert candidates("SELECT * FROM c", names, columns)[1][0] == "clicks"  # a relation, not a column


def test_meta_commands_of_display(tmp_path: Path) -> None:
    from tests.test_repl import shell

    repl, out = shell(tmp_path)
    for line in ("\\x", "\\x", "\\x auto", "\\x sideways", "\\pset pager off", "\\pset pager",
                 "\\pset pager maybe", "\\pset border 2", "\\dv", "\\dm"):
        assert repl.handle(line)
    assert out.getvalue().splitlines() == [
        "Expanded display is on.",
        "Expanded display is off.",
        "Expanded display is used automatically.",
        '\\x: unrecognized value "sideways"; expected on, off or auto',
        "Pager usage is off.",
        "Pager usage is on.",
        '\\pset: unrecognized value "maybe" for "pager"; expected on or off',
        "\\pset: unknown option: border; sluice knows pager",
        " name",
        "------",
        "(0 rows)",
        " name | timeline",
        "------+----------",
        "(0 rows)",
    ]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_wait_shows_one_line_redrawn_then_erased() -> None:
    import time

    from sluice.cli.progress import watched

    out = Tty()
    seen = []

    def describe(waited: float) -> str:
        seen.append(waited)
        return f"busy {len(seen)}"

    assert watched(lambda: time.sleep(0.8) or 42, ProgressLine(out, describe, delay=0.2)) == 42
    drawn = out.getvalue()
    assert drawn.startswith("\rbusy 1\x1b[K") and drawn.endswith("\r\x1b[K") and "\n" not in drawn
    assert 1 < len(seen) <= 4 and min(seen) >= 0.2  # after the delay, at most every quarter second
    quick = Tty()
    assert watched(lambda: 1, ProgressLine(quick, describe)) == 1
    assert quick.getvalue() == ""  # done within the delay: nothing drawn
    with pytest.raises(ZeroDivisionError):
        watched(lambda: 1 / 0, ProgressLine(Tty(), describe))
