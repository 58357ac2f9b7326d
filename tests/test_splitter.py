"""Statement splitting keeps quoted and commented semicolons inside their statement."""

import pytest

from sluice.syntax.splitter import find_unterminated, split_statements


def pieces(text: str) -> list[str]:
    return [text[a:b].strip() for a, b in split_statements(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        (" ;; -- nothing\n; /* */ ", []),
        ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
        ("SELECT ';' ; SELECT 2;", ["SELECT ';'", "SELECT 2"]),
        ("SELECT 'it''s;' ; x", ["SELECT 'it''s;'", "x"]),
        ('SELECT "a;b"; x', ['SELECT "a;b"', "x"]),
        ("SELECT 1 -- a;b\n; x", ["SELECT 1 -- a;b", "x"]),
        ("SELECT /* ; */ 1; x", ["SELECT /* ; */ 1", "x"]),
        ("SELECT $$a;b$$; x", ["SELECT $$a;b$$", "x"]),
        ("SELECT $t$ ;$$; $t$; x", ["SELECT $t$ ;$$; $t$", "x"]),
        ("SELECT E'\\';'; x", ["SELECT E'\\';'", "x"]),
        ("SELECT a$b; x", ["SELECT a$b", "x"]),
    ],
)
def test_split(text: str, expected: list[str]) -> None:
    assert pieces(text) == expected


def test_offsets_are_absolute() -> None:
    text = "SHOW SOURCES;\n  SHOW VIEWS"
    (_, _), (start, end) = split_statements(text)
    assert text[start:end].strip() == "SHOW VIEWS"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT 'abc", (7, "unterminated quoted string")),
        ('SELECT "abc', (7, "unterminated quoted identifier")),
        ("SELECT 1 /* abc", (9, "unterminated multiline comment")),
        ("SELECT $$abc", (7, "unterminated dollar-quoted string")),
        ("SELECT 'abc' /* x */", None),
    ],
)
def test_find_unterminated(text: str, expected) -> None:
    assert find_unterminated(text) == expected
