"""What a failed Spark job or stream was failing for, in words a user can act on.

Spark wraps an error raised in a Python data source or a `foreachBatch` function in
layers of its own: a `StreamingQueryException` whose `getMessage()` is empty, a task
failure quoting the Python traceback inside Java's. The reason is found in that text:
the `SourceUnavailable` a read raised (its own words), else the last Python exception of
the last traceback (sluice's own by its text alone, as its texts are written for users;
another by its name and text), else the first line of Spark's message — never nothing.
A write that found no space left (Java's IOException or Python's OSError, anywhere in
that text) is PostgreSQL's disk-full text, naming the file or else the folder written.
"""

from __future__ import annotations

import re

from sluice.errors import disk_full_in
from sluice.kafka.retry import reason_of

_TRACEBACK = "Traceback (most recent call last):"
# The line a Python traceback ends with: `module.ErrorName: message`, unindented.
_PYTHON_ERROR = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)): (\S.*)$", re.M)
_SPARK_CONDITION = re.compile(r"^\[[A-Z_.]+\] ")


def failure_reason(error: BaseException, where: str) -> str:
    """Why `error` failed the writing of the folder `where` (a source's store, a sink's state)."""
    text = str(error)
    unavailable = reason_of(text)
    if unavailable is not None:
        return unavailable[1]
    disk_full = disk_full_in(text, where)
    if disk_full is not None:
        return disk_full
    if _TRACEBACK in text:
        raised = _PYTHON_ERROR.search(text.rsplit(_TRACEBACK, 1)[1])
        if raised is not None:
            qualified, name, message = raised.groups()
            return message.strip() if qualified.startswith("sluice.") else f"{name}: {message.strip()}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return _SPARK_CONDITION.sub("", first) or type(error).__name__
