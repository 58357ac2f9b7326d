"""Golden parse tests: tests/golden/*.test, directive `parse`.

The output of a statement that parses is its canonical SQL, `=>`, and its syntax tree;
the output of one that does not is the formatted error with its caret.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import sluice
from sluice.syntax.ast import dump
from tests.golden import Record, check_records, read_records

GOLDEN = Path(__file__).parent / "golden"
FILES = sorted(GOLDEN.glob("*.test"))


def render(record: Record) -> str:
    assert record.directive == "parse", f"line {record.line}: unknown directive"
    try:
        statements = sluice.parse(record.input)
    except sluice.SqlError as e:
        return sluice.format_error(e, record.input)
    out: list[str] = []
    for statement in statements:
        out += [statement.to_sql(), "=>", dump(statement)]
    return "\n".join(out)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_golden(path: Path, request: pytest.FixtureRequest) -> None:
    check_records(path, render, request.config.getoption("--rewrite"))


def test_golden_corpus_size() -> None:
    records = [r for path in FILES for r in read_records(path)]
    errors = [r for r in records if r.expected.startswith("ERROR:")]
    assert len(records) - len(errors) >= 80
    assert len(errors) >= 30
    assert all("^" in r.expected for r in errors), "every error case shows a caret"
