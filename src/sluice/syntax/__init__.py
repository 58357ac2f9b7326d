"""Text → typed AST for the sluice dialect (and AST → canonical SQL via `to_sql`).

The only package that imports Lark. `parse` splits a script into statements, parses each
with the cached LALR parser and builds the AST; every failure is a `SqlError`: a
`ParseError` for text that is not the dialect, `StatementTooComplex` for a statement nested
too deeply, and (a bug) an internal error naming the Python one.
"""

from __future__ import annotations

from lark.exceptions import UnexpectedInput

from sluice.errors import ParseError, Span, user_errors
from sluice.syntax import ast
from sluice.syntax.builder import Builder
from sluice.syntax.diagnostics import translate
from sluice.syntax.grammar import parser
from sluice.syntax.splitter import split_statements

__all__ = ["ast", "parse", "parse_one", "parse_statement", "redact_secrets"]


@user_errors
def parse(text: str) -> list[ast.Statement]:
    """Every statement of a `;`-separated script, spans absolute in `text`."""
    return [parse_statement(text, start, end) for start, end in split_statements(text)]


@user_errors
def parse_one(text: str) -> ast.Statement:
    """Exactly one statement (a trailing `;` is allowed)."""
    pieces = list(split_statements(text))
    if len(pieces) != 1:
        where = Span(pieces[1][0], pieces[1][0]) if pieces else Span(len(text), len(text))
        found = "EOF" if not pieces else "a second statement"
        raise ParseError(f"Expected one statement, found {found}", span=where)
    return parse_statement(text, *pieces[0])


@user_errors
def parse_statement(text: str, start: int, end: int) -> ast.Statement:
    """The statement in `text[start:end]`."""
    statement = text[start:end]
    try:
        tree = parser().parse(statement)
    except UnexpectedInput as e:
        raise translate(e, statement, start) from None
    return Builder(start).build(tree)


def redact_secrets(text: str) -> str:
    """`text` with the value of every secret statement in it replaced (for a history file
    or a job description); text that does not parse is left as it is."""
    values = []
    for start, end in split_statements(text):
        try:
            statement = parse_statement(text, start, end)
        except ParseError:
            continue
        if isinstance(statement, ast.SecretStatement) and statement.value.span is not None:
            values.append(statement.value.span)
    for span in reversed(values):
        text = text[: span.start] + ast.quote_string(ast.REDACTED) + text[span.end :]
    return text
