"""SqlError's shape and `format_error`'s psql-style rendering."""

import pytest

import sluice
from sluice.errors import FeatureNotSupported, ParseError, Span, SqlError, format_error


def test_leaves_carry_sqlstate() -> None:
    assert ParseError("x").code == "42601"
    assert FeatureNotSupported("x").code == "0A000"
    assert issubclass(ParseError, SqlError)


def test_format_with_detail_and_hint() -> None:
    err = SqlError("bad thing", span=Span(7, 8), detail="more", hint="try this")
    assert format_error(err, "SELECT x") == (
        "ERROR:  bad thing\nLINE 1: SELECT x\n               ^\nDETAIL:  more\nHINT:  try this"
    )


def test_format_without_text_or_span() -> None:
    assert format_error(SqlError("no position")) == "ERROR:  no position"


def test_long_lines_are_windowed_around_the_caret() -> None:
    text = "SELECT " + ", ".join(f"c{i}" for i in range(60)) + " FROM"
    err = SqlError("here", span=Span(text.index("c30"), text.index("c30")))
    line, caret = format_error(err, text).splitlines()[1:3]
    assert line.startswith("LINE 1: ...") and line.endswith("...")
    assert line[caret.index("^") :].startswith("c30")


def test_caret_on_later_line_counts_lines() -> None:
    text = "SHOW SOURCES;\nSHOW VIEWS;\nSHOW NONSENSE"
    with pytest.raises(sluice.ParseError) as info:
        sluice.parse(text)
    rendered = format_error(info.value, text).splitlines()
    assert rendered[1] == "LINE 3: SHOW NONSENSE"
    assert rendered[2].index("^") == len("LINE 3: SHOW ")


def test_parse_one_wants_exactly_one_statement() -> None:
    with pytest.raises(sluice.ParseError, match="found a second statement"):
        sluice.parse_one("SHOW SOURCES; SHOW VIEWS")
    with pytest.raises(sluice.ParseError, match="found EOF"):
        sluice.parse_one("  -- nothing\n")
    assert sluice.parse_one("SHOW SOURCES;").to_sql() == "SHOW SOURCES"
