"""sluice: a Materialize-flavoured streaming SQL dialect compiled to PySpark.

The embedded API. Parsing never imports Spark or starts Java. Besides parsing and the
`Session`, it holds what a front end needs of a script's text: where its statements are
(`split_statements`, `find_unterminated`), a statement's syntax tree as text (`dump`),
the text with secrets' values hidden (`redact_secrets`), the dialect's `KEYWORDS`.
"""

from sluice.errors import FeatureNotSupported, ParseError, Span, SqlError, format_error
from sluice.session import Result, Session
from sluice.syntax import parse, parse_one, parse_statement, redact_secrets
from sluice.syntax.ast import dump
from sluice.syntax.keywords import KEYWORDS
from sluice.syntax.splitter import find_unterminated, split_statements

__all__ = [
    "KEYWORDS",
    "FeatureNotSupported",
    "ParseError",
    "Result",
    "Session",
    "Span",
    "SqlError",
    "dump",
    "find_unterminated",
    "format_error",
    "parse",
    "parse_one",
    "parse_statement",
    "redact_secrets",
    "split_statements",
]
