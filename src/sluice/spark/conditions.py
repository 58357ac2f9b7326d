"""Spark's error conditions, read back: the one place that knows the shape of the errors
Spark raises by itself (not sluice's code inside it), and reads them as PostgreSQL's or
sluice's words.

The protocol is Spark's (4.x, its error framework): an exception carries an error
condition (`DIVIDE_BY_ZERO`, `UNRESOLVED_ROUTINE`, …) and named parameters, and its
message's first line is `[CONDITION] words SQLSTATE: code`; the JVM's own exceptions,
raised outside that framework, quote the condition in their text only. Read here:
- for what the evaluation rule leaves to Spark (correlated subqueries, subqueries
  yielding many rows): the evaluation error PostgreSQL would have reported
  (`evaluation_error`), from the condition and parameters alone, so it needs no JVM;
- a function Spark does not know, by the name the user wrote (`unresolved_function`);
- a query Spark refuses to analyse, in Spark's words (`refusal`);
- any first line of a Spark failure without its condition (`without_condition`);
- a failure's condition and parameters (`condition`, `parameters`), for `guards`.
`render/executor.py` turns a statement's failure into its SQL error with these, and
`failures` words a failed job or stream with `without_condition`.
"""

from __future__ import annotations

import re

from sluice.errors import EVALUATION_ERROR

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
_CONDITION_PREFIX = re.compile(r"^\[[A-Z_.]+\] ")
_SQLSTATE_SUFFIX = re.compile(r" SQLSTATE: \w+$")


def condition(error: BaseException) -> str | None:
    """The error condition of a failure Spark raised in its error framework, else None."""
    return getattr(error, "getCondition", lambda: None)()


def parameters(error: BaseException) -> dict[str, str]:
    """The parameters of the message of a failure Spark raised in its error framework."""
    return getattr(error, "getMessageParameters", lambda: None)() or {}


def evaluation_error(error: BaseException) -> str | None:
    """The evaluation error PostgreSQL would have reported where Spark raised instead,
    or None when the failure is no evaluation error."""
    named = condition(error)
    given = parameters(error)
    if named is None:  # raised by the JVM outside Spark's error framework
        match = _CONDITION.search(str(error))
        named = match.group(1) if match else None
    target = given.get("targetType", "").strip('"')
    name = "numeric" if target.startswith("DECIMAL") else _SPARK_TYPES.get(target, target.lower())
    if named in ("DIVIDE_BY_ZERO", "INTERVAL_DIVIDED_BY_ZERO"):
        message = "division by zero"
    elif named == "ARITHMETIC_OVERFLOW":
        message = "value out of range: overflow"
    elif named == "CAST_OVERFLOW":
        message = f"{name} out of range"
    elif named == "CAST_INVALID_INPUT":
        value = given.get("expression", "")
        if value.startswith("'") and value.endswith("'"):  # Spark's literal: \ before ' and \
            value = re.sub(r"\\(.)", r"\1", value[1:-1], flags=re.S)
        message = f'invalid input syntax for type {name}: "{value}"'
    elif named == "SCALAR_SUBQUERY_TOO_MANY_ROWS":
        message = "more than one row returned by a subquery used as an expression"
    else:
        return None
    return EVALUATION_ERROR + message


def unresolved_function(error: BaseException) -> str | None:
    """The function Spark does not know, as the user named it (lower case, unquoted),
    if that is the failure."""
    if condition(error) != "UNRESOLVED_ROUTINE":
        return None
    return parameters(error).get("routineName", "").strip("`").lower()


def refusal(error: BaseException) -> str:
    """What Spark refused, in its own words: its message's first line without the
    condition, the SQLSTATE and the closing period, starting lower case."""
    first = (getattr(error, "getMessage", lambda: None)() or str(error)).split("\n")[0]
    first = _SQLSTATE_SUFFIX.sub("", without_condition(first)).rstrip(". ")
    return f"{first[:1].lower()}{first[1:]}"


def without_condition(line: str) -> str:
    """A line of Spark's message without the `[CONDITION] ` it opens with."""
    return _CONDITION_PREFIX.sub("", line)
