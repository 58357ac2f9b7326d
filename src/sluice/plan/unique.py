"""The one check that column names are unique, shared by every place columns are made."""

from __future__ import annotations

from collections.abc import Iterable

from sluice.catalog.types import Column
from sluice.errors import DuplicateColumn, Span


def unique_columns(columns: Iterable[tuple[Column, Span | None]]) -> tuple[Column, ...]:
    seen: set[str] = set()
    out: list[Column] = []
    for column, span in columns:
        if column.name in seen:
            raise DuplicateColumn(f'column "{column.name}" specified more than once', span=span)
        seen.add(column.name)
        out.append(column)
    return tuple(out)
