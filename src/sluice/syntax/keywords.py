"""The dialect's keywords, read from the grammar text (no Lark needed to know them)."""

from __future__ import annotations

import re
from importlib import resources

GRAMMAR_FILE = "sluice.lark"


def grammar_text() -> str:
    return resources.files("sluice.grammar").joinpath(GRAMMAR_FILE).read_text(encoding="utf-8")


# Words that open a query body; the grammar matches them inside regex terminals.
_QUERY_LEADS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "INSERT", "UPDATE", "DELETE"})

KEYWORDS: frozenset[str] = frozenset(
    m.upper() for m in re.findall(r'"([A-Za-z]+)"i', grammar_text())
) | _QUERY_LEADS

# Keywords that the parser accepts in some state where an identifier is also accepted; the
# lexer reads them as keywords there, so an identifier spelled like one must be quoted.
# tests/test_keywords.py recomputes this set from the LALR table.
RESERVED: frozenset[str] = frozenset(
    {
        "AS",
        "ASC",
        "CASCADE",
        "DEFAULT",
        "DESC",
        "ENVELOPE",
        "FOR",
        "FROM",
        "IF",
        "INCLUDE",
        "INTO",
        "NOT",
        "NULL",
        "ON",
        "PRIMARY",
        "RESTRICT",
        "TO",
        "UNIQUE",
        "VALUE",
        "WITH",
    }
)

# Keywords that may follow a word of a column's type name (its constraints), so a type
# word spelled like one of them must be quoted.
TYPE_WORD_RESERVED: frozenset[str] = frozenset({"NOT", "NULL", "PRIMARY", "UNIQUE", "DEFAULT"})
