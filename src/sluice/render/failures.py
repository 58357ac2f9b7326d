"""What a failed Spark job or stream was failing for, in words a user can act on.

Spark wraps an error raised in a Python data source or a `foreachBatch` function in
layers of its own: a `StreamingQueryException` whose `getMessage()` is empty, a task
failure quoting the Python traceback inside Java's. The reason is found in that text:
the `SourceUnavailable` a read raised (its own words), else the last Python exception of
the last traceback (sluice's own by its text alone, as its texts are written for users;
another by its name and text), else the first line of Spark's message — never nothing.
"""

from __future__ import annotations

import re

from sluice.kafka.retry import reason_of

_TRACEBACK = "Traceback (most recent call last):"
# The line a Python traceback ends with: `module.ErrorName: message`, unindented.
_PYTHON_ERROR = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)): (\S.*)$", re.M)
_SPARK_CONDITION = re.compile(r"^\[[A-Z_.]+\] ")


def failure_reason(error: BaseException) -> str:
    text = str(error)
    unavailable = reason_of(text)
    if unavailable is not None:
        return unavailable[1]
    found = raised(error)
    if found is not None:
        qualified, message = found
        return message if qualified.startswith("sluice.") else f"{qualified.rsplit('.', 1)[-1]}: {message}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return _SPARK_CONDITION.sub("", first) or type(error).__name__


def raised(error: BaseException) -> tuple[str, str] | None:
    """The Python exception the failure quotes last (its qualified name and its text), if any."""
    text = str(error)
    if _TRACEBACK not in text:
        return None
    found = _PYTHON_ERROR.search(text.rsplit(_TRACEBACK, 1)[1])
    if found is None:
        return None
    qualified, _, message = found.groups()
    return qualified, message.strip()


def raised_as(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether the failure quotes `kind` (a sluice exception) as the Python exception raised."""
    found = raised(error)
    return found is not None and found[0] == f"{kind.__module__}.{kind.__qualname__}"
