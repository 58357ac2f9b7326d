"""sluice: a Materialize-flavoured streaming SQL dialect compiled to PySpark.

The embedded API. Parsing never imports Spark or starts Java.
"""

from sluice.errors import FeatureNotSupported, ParseError, Span, SqlError, format_error
from sluice.session import Result, Session
from sluice.syntax import parse, parse_one

__all__ = [
    "FeatureNotSupported",
    "ParseError",
    "Result",
    "Session",
    "Span",
    "SqlError",
    "format_error",
    "parse",
    "parse_one",
]
