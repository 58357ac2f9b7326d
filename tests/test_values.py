"""How values print: PostgreSQL's text output (the REPL, `sluice run`), Materialize's
numeric, and the sqllogic form (DESIGN.md §7) built on it."""

from __future__ import annotations

import datetime
from decimal import Decimal

from sluice.cli.table import format_table
from sluice.values import pg_text, slt_value


def test_pg_text_is_postgres_text_output() -> None:
    assert [pg_text(v) for v in (True, False, None, "", "x y", b"\x00\xab", '{"a":1}')] == [
        "t", "f", "NULL", "", "x y", "\\x00ab", '{"a":1}',
    ]
    # numeric as Materialize prints it: trailing zeros trimmed whatever the scale
    assert [pg_text(Decimal(v)) for v in ("1.50", "3.0000000000", "100", "-0.0", "0.001")] == [
        "1.5", "3", "100", "0", "0.001",
    ]
    assert [pg_text(v) for v in (1.0, 0.1, 1e20, float("nan"))] == ["1", "0.1", "1e+20", "NaN"]
    ts = datetime.datetime(2024, 1, 2, 3, 4, 5, 120000)
    assert pg_text(ts) == "2024-01-02 03:04:05.12"
    assert pg_text(ts.replace(tzinfo=datetime.timezone(datetime.timedelta(hours=-5, minutes=-30)))) == (
        "2024-01-02 03:04:05.12-05:30"
    )
    assert pg_text(datetime.timedelta(days=1, seconds=3723)) == "1 day 01:02:03"
    # record_out doubles the quotes of a quoted field (arrays escape them with backslashes)
    assert pg_text(("a b", None, True, 1, (2, ""))) == '("a b",,t,1,"(2,"""")")'
    assert pg_text([True, None, "NULL"]) == '{t,NULL,"NULL"}'


def test_sqllogic_values_say_true_and_false_at_the_top_and_t_f_in_records() -> None:
    # Materialize's runner prints a boolean `true`, a record in its text (record_out's t/f).
    assert slt_value(True) == "true" and slt_value((True, False)) == "(t,f)"
    assert slt_value("") == "(empty)" and slt_value(Decimal("2.50")) == "2.5"


def test_result_tables_right_align_numbers_and_show_postgres_text() -> None:
    assert format_table(("b", "n"), [(True, Decimal("1.50")), (False, Decimal(10))]).splitlines() == [
        " b |  n ",
        "---+-----",
        " t | 1.5",
        " f |  10",
        "(2 rows)",
    ]
