"""Turning Lark's parse failures into `ParseError`s worded the way Materialize words them.

`Expected one of INLINE or PROPAGATE, found right parenthesis`: what the parser state
accepts (when the choice is small enough to be useful) and what it met instead, with the
span of the offending token.
"""

from __future__ import annotations

import re

from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lexer import Token

from sluice.errors import ParseError, Span
from sluice.syntax.keywords import KEYWORDS

_MAX_LISTED = 10

_TERMINALS = {
    "LPAR": "left parenthesis",
    "RPAR": "right parenthesis",
    "LSQB": "left square bracket",
    "RSQB": "right square bracket",
    "COMMA": "comma",
    "DOT": "dot",
    "EQUAL": "equals sign",
    "SIGN": "sign",
    "IDENTIFIER": "identifier",
    "QUOTED_IDENTIFIER": "identifier",
    "STRING": "string literal",
    "INTEGER": "number",
    "DECIMAL": "number",
    "QUERY": "query",
    "PAREN_QUERY": "left parenthesis",
    "INSERT_STATEMENT": "INSERT",
    "UPDATE_STATEMENT": "UPDATE",
    "DELETE_STATEMENT": "DELETE",
    "$END": "EOF",
}

_STATEMENT_LEADS = {"CREATE", "DROP", "SHOW", "EXPLAIN", "SUBSCRIBE", "QUERY"}
# Statements whose strings may be secret values or credentials.
_GIVES_CREDENTIALS = re.compile(r"\s*(?:CREATE\s+(?:SECRET|CONNECTION)|ALTER\s+SECRET)\b", re.IGNORECASE)


def translate(error: UnexpectedInput, statement: str, offset: int) -> ParseError:
    """A `ParseError` for Lark's `error` in `statement`, found at `offset` in the script."""
    if isinstance(error, UnexpectedToken):
        return _unexpected_token(error, statement, offset)
    if isinstance(error, UnexpectedCharacters):
        return _unexpected_characters(error, statement, offset)
    pos = offset + (getattr(error, "pos_in_stream", None) or 0)
    return ParseError("Unexpected end of statement", span=Span(pos, pos))


def _unexpected_token(error: UnexpectedToken, statement: str, offset: int) -> ParseError:
    token = error.token
    found = describe_token(token)
    if token.type == "STRING" and _GIVES_CREDENTIALS.match(statement):
        found = "string literal"  # it may be a secret's value: an error text never shows one
    if token.type == "$END":
        start = end = offset + len(statement.rstrip())
    else:
        start = offset + token.start_pos
        end = start + len(token.value)
    if token.type in ("QUERY", "INSERT_STATEMENT", "UPDATE_STATEMENT", "DELETE_STATEMENT"):
        end = start + len(_first_word(token.value))
    span = Span(start, end)
    expected = _acceptable(error)
    if _STATEMENT_LEADS <= expected:
        return ParseError(
            f"Expected a keyword at the beginning of a statement, found {found}", span=span
        )
    return ParseError(f"Expected {_describe_expected(expected)}, found {found}", span=span)


def _acceptable(error: UnexpectedToken) -> set[str]:
    """The terminals that would really have been accepted at the error.

    The LALR table's entry for the state also lists reduce lookaheads that merged states
    share, which would make the message name tokens that cannot follow; asking the
    interactive parser to try each one gives the exact set.
    """
    if error.interactive_parser is not None:
        return set(error.interactive_parser.accepts())
    return set(error.expected)


def _unexpected_characters(
    error: UnexpectedCharacters, statement: str, offset: int
) -> ParseError:
    at = error.pos_in_stream or 0  # as lark reads it
    pos = offset + at
    char = error.char
    span = Span(pos, pos + 1)
    if char == "'":
        return ParseError("unterminated quoted string", span=span)
    if char == '"':
        return ParseError("unterminated quoted identifier", span=span)
    if statement.startswith("/*", at):
        return ParseError("unterminated multiline comment", span=span)
    allowed = set(error.allowed or ())
    found = f'character "{char}"'
    if not allowed:
        return ParseError(f"unexpected {found}", span=span)
    return ParseError(f"Expected {_describe_expected(allowed)}, found {found}", span=span)


def _describe_expected(names: set[str]) -> str:
    described = sorted({_TERMINALS.get(n, n) for n in names if not n.startswith("__")})
    keywords = [d for d in described if d in KEYWORDS]
    others = [d for d in described if d not in KEYWORDS]
    items = keywords + others
    if len(items) == 1:
        return items[0]
    if len(items) > _MAX_LISTED:
        return "one of " + ", ".join(items[:_MAX_LISTED]) + ", ..."
    return "one of " + ", ".join(items[:-1]) + " or " + items[-1]


def describe_token(token: Token) -> str:
    kind = token.type
    if kind == "$END":
        return "EOF"
    if kind in ("IDENTIFIER", "QUOTED_IDENTIFIER"):
        quoted = token.value if kind == "QUOTED_IDENTIFIER" else f'"{token.value}"'
        return f"identifier {quoted}"
    if kind == "STRING":
        return f"string literal {token.value}"
    if kind in ("INTEGER", "DECIMAL"):
        return f'number "{token.value}"'
    if kind == "PAREN_QUERY":
        return "left parenthesis"
    if kind in ("QUERY", "INSERT_STATEMENT", "UPDATE_STATEMENT", "DELETE_STATEMENT"):
        word = _first_word(token.value)
        return _TERMINALS["LPAR"] if word == "(" else word.upper()
    if kind in _TERMINALS:
        return _TERMINALS[kind]
    return token.value.upper()


def _first_word(text: str) -> str:
    """The keyword (or parenthesis) a captured query body starts with."""
    lead = _LEAD.match(text)
    return "" if lead is None else lead.group()


_LEAD = re.compile(r"[A-Za-z]+|\(")
