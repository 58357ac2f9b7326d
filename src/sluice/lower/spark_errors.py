"""Spark's failures named as PostgreSQL's evaluation errors, for what the evaluation rule
leaves to Spark (correlated subqueries, subqueries yielding many rows). Read from the
exception's error condition and parameters alone, so it needs no JVM."""

from __future__ import annotations

import re

from sluice.lower.error_text import PREFIX

_SPARK_TYPES = {
    "SMALLINT": "smallint",
    "INT": "integer",
    "BIGINT": "bigint",
    "DOUBLE": "double precision",
    "FLOAT": "real",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
}
_CONDITION = re.compile(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\]")


def spark_error(error: Exception) -> str | None:
    """The evaluation error PostgreSQL would have reported where Spark raised instead,
    or None when the failure is no evaluation error."""
    condition = getattr(error, "getCondition", lambda: None)()
    parameters = getattr(error, "getMessageParameters", lambda: None)() or {}
    if condition is None:  # raised by the JVM outside Spark's error framework
        match = _CONDITION.search(str(error))
        condition = match.group(1) if match else None
    target = parameters.get("targetType", "").strip('"')
    name = "numeric" if target.startswith("DECIMAL") else _SPARK_TYPES.get(target, target.lower())
    if condition in ("DIVIDE_BY_ZERO", "INTERVAL_DIVIDED_BY_ZERO"):
        message = "division by zero"
    elif condition == "ARITHMETIC_OVERFLOW":
        message = "value out of range: overflow"
    elif condition == "CAST_OVERFLOW":
        message = f"{name} out of range"
    elif condition == "CAST_INVALID_INPUT":
        value = parameters.get("expression", "")
        if value.startswith("'") and value.endswith("'"):
            value = value[1:-1].replace("''", "'")
        message = f'invalid input syntax for type {name}: "{value}"'
    elif condition == "SCALAR_SUBQUERY_TOO_MANY_ROWS":
        message = "more than one row returned by a subquery used as an expression"
    else:
        return None
    return PREFIX + message
