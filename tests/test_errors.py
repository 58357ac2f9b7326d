"""SqlError's shape, `format_error`'s psql-style rendering, and the SQLSTATE of the error
a query fails with when a collection it reads holds one (`collection_error`)."""

import ast
import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sluice
from sluice import errors
from sluice.errors import (
    DECODE_ERROR,
    MISSING_KEY_OR_VALUE,
    OFFSETS_LOST,
    FeatureNotSupported,
    ParseError,
    Span,
    SqlError,
    collection_error,
    format_error,
)


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


# Each evaluation error sluice reports (lower/evaluation.py's words, PostgreSQL's) and the
# SQLSTATE PostgreSQL gives it.
EVALUATION_ERRORS = [
    ("division by zero", "22012"),
    ("smallint out of range", "22003"),
    ("integer out of range", "22003"),
    ("bigint out of range", "22003"),
    ("numeric out of range", "22003"),
    ("value out of range: overflow", "22003"),
    ('value "99999999999" is out of range for type integer', "22003"),
    ('invalid input syntax for type integer: "x"', "22P02"),
    ('invalid input syntax for type double precision: ""', "22P02"),
    ("invalid input syntax for type json", "22P02"),
    ("more than one row returned by a subquery used as an expression", "21000"),
]


@pytest.mark.parametrize(("words", "code"), EVALUATION_ERRORS)
def test_an_evaluation_error_carries_postgresql_sqlstate(words: str, code: str) -> None:
    error = collection_error(f"Evaluation error: {words}", None)
    assert (error.code, error.message) == (code, f"Evaluation error: {words}")


@given(st.text())
def test_a_value_in_the_words_never_changes_the_sqlstate(value: str) -> None:
    quoted = f'"{value}"'
    assert collection_error(f"Evaluation error: invalid input syntax for type integer: {quoted}", None).code == "22P02"
    assert collection_error(f"Evaluation error: value {quoted} is out of range for type integer", None).code == "22003"


@pytest.mark.parametrize("code", [DECODE_ERROR, MISSING_KEY_OR_VALUE, OFFSETS_LOST])
def test_an_errs_row_fails_a_query_with_its_own_code(code: str) -> None:
    error = collection_error("Decode error: whatever", code)
    assert (error.code, error.message) == (code, "Decode error: whatever")


def test_a_code_of_an_older_store_still_fails_with_its_message() -> None:
    error = collection_error("Decode error: old", "decode-value")
    assert (error.code, error.message) == ("22000", "Decode error: old")


def test_every_error_class_lives_in_errors_py() -> None:
    """One hierarchy in one module: no other module of sluice defines a SqlError."""
    defined = []
    for path in Path(inspect.getfile(sluice)).parent.rglob("*.py"):
        if path.name == "errors.py" and path.parent.name == "sluice":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                getattr(base, "id", getattr(base, "attr", "")) in _SQL_ERRORS for base in node.bases
            ):
                defined.append(f"{path.name}:{node.name}")
    assert defined == []


_SQL_ERRORS = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, SqlError)}
