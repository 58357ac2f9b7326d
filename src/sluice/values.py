"""Values as text for people: one rendering shared by the CLI, goldens and (later) the REPL
and the sqllogic runner. NULL is `NULL`, booleans `true`/`false`."""

from __future__ import annotations

from typing import Any


def value_text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
