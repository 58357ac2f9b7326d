"""Table rows: one JSON-lines file per table under `<data>/tables/` (see `storage`).

A write replaces the whole file crash-safely (`Location.replace`: a temporary file,
synced, renamed over it), so a table is always either before or after a statement.
Values are stored as JSON per their column type (numbers as text where JSON would lose
them, bytes as hex, times as ISO).
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from sluice.catalog.items import Item
from sluice.catalog.types import Column, SqlType
from sluice.storage.location import Location


class TableStore:
    def __init__(self, data: Location) -> None:
        self.root = data / "tables"

    def path(self, item: Item) -> Location:
        return self.root / f"{item.id}.jsonl"

    def read(self, item: Item) -> list[tuple]:
        return rows_of(item.columns, self.text(item))

    def text(self, item: Item) -> str:
        """The table's rows as stored: equal texts are equal rows."""
        try:
            return self.path(item).read_text()
        except FileNotFoundError:
            return ""

    def write(self, item: Item, rows: list[tuple]) -> None:
        text = "".join(json.dumps([_encode(v) for v in row]) + "\n" for row in rows)
        self.path(item).replace(text.encode("utf-8"))

    def drop(self, item: Item) -> None:
        self.path(item).remove()


def rows_of(columns: tuple[Column, ...], text: str) -> list[tuple]:
    """The rows a table's stored `text` holds, valued by their `columns`' types."""
    types = [c.type for c in columns]
    return [tuple(_decode(t, v) for t, v in zip(types, json.loads(line), strict=True)) for line in text.splitlines()]


def _encode(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


def _decode(sql_type: SqlType, value: Any) -> Any:
    if value is None:
        return None
    name = sql_type.name
    if name == "numeric":
        return Decimal(value)
    if name == "bytea":
        return bytes.fromhex(value)
    if name == "date":
        return dt.date.fromisoformat(value)
    if name in ("timestamp", "timestamp with time zone"):
        return dt.datetime.fromisoformat(value)
    if name == "time":
        return dt.time.fromisoformat(value)
    return value
