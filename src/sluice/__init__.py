"""sluice: a Materialize-flavoured streaming SQL dialect compiled to PySpark.

The embedded API. Parsing never imports Spark or starts Java. Besides parsing and the
`Session`, it holds what a front end needs of a script's text: where its statements are
(`split_statements`, `find_unterminated`), a statement's syntax tree as text (`dump`),
the text with secrets' values hidden (`redact_secrets`), the dialect's `KEYWORDS`.
"""

import importlib

# Each name's module: imported on first use, so that what imports one part of the package
# (a Spark worker reading Kafka imports `sluice.spark.kafka_source`) does not import the rest.
_HOMES = {
    "KEYWORDS": "sluice.syntax.keywords",
    "FeatureNotSupported": "sluice.errors",
    "ParseError": "sluice.errors",
    "Result": "sluice.session",
    "Session": "sluice.session",
    "Span": "sluice.errors",
    "SqlError": "sluice.errors",
    "dump": "sluice.syntax.ast",
    "find_unterminated": "sluice.syntax.splitter",
    "format_error": "sluice.errors",
    "parse": "sluice.syntax",
    "parse_one": "sluice.syntax",
    "parse_statement": "sluice.syntax",
    "redact_secrets": "sluice.syntax",
    "split_statements": "sluice.syntax.splitter",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [  # noqa: F822 - each is found by __getattr__
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
