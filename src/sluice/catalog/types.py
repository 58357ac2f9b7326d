"""Column types as Materialize names them, and column descriptions.

Plain, serialisable data: `SqlType.to_json()` / `SqlType.from_json()` round-trip, so the
durable catalog stores columns exactly. `unique_columns` is the one check that column
names are unique, shared by every place columns are made.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sluice.errors import DuplicateColumn, Span


@dataclass(frozen=True)
class SqlType:
    """`name` is Materialize's type name; records carry `fields`, lists their `element`."""

    name: str
    fields: tuple[Column, ...] = ()
    element: SqlType | None = None

    def display(self) -> str:
        if self.name == "list" and self.element is not None:
            return f"{self.element.display()} list"
        if self.name == "map" and self.element is not None:
            return f"map[text=>{self.element.display()}]"
        return self.name

    def to_json(self) -> Any:
        if not self.fields and self.element is None:
            return self.name
        out: dict[str, Any] = {"name": self.name}
        if self.fields:
            out["fields"] = [c.to_json() for c in self.fields]
        if self.element is not None:
            out["element"] = self.element.to_json()
        return out

    @staticmethod
    def from_json(data: Any) -> SqlType:
        if isinstance(data, str):
            return SqlType(data)
        element = data.get("element")
        return SqlType(
            data["name"],
            tuple(Column.from_json(c) for c in data.get("fields", ())),
            None if element is None else SqlType.from_json(element),
        )


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    nullable: bool

    def renamed(self, name: str) -> Column:
        return Column(name, self.type, self.nullable)

    def as_nullable(self) -> Column:
        return Column(self.name, self.type, True)

    def to_json(self) -> Any:
        return [self.name, self.type.to_json(), self.nullable]

    @staticmethod
    def from_json(data: Any) -> Column:
        name, type_, nullable = data
        return Column(name, SqlType.from_json(type_), bool(nullable))


def unique_columns(columns: Iterable[tuple[Column, Span | None]]) -> tuple[Column, ...]:
    seen: set[str] = set()
    out: list[Column] = []
    for column, span in columns:
        if column.name in seen:
            raise DuplicateColumn(f'column "{column.name}" specified more than once', span=span)
        seen.add(column.name)
        out.append(column)
    return tuple(out)


# PostgreSQL's (and Materialize's) name for a column nothing names.
UNNAMED_COLUMN = "?column?"


def record(*fields: Column) -> SqlType:
    return SqlType("record", tuple(fields))


def list_of(element: SqlType) -> SqlType:
    return SqlType("list", element=element)


TEXT = SqlType("text")
BYTEA = SqlType("bytea")
JSONB = SqlType("jsonb")
INTEGER = SqlType("integer")
BIGINT = SqlType("bigint")
REAL = SqlType("real")
DOUBLE = SqlType("double precision")
BOOLEAN = SqlType("boolean")
NUMERIC = SqlType("numeric")
DATE = SqlType("date")
TIME = SqlType("time")
TIMESTAMP = SqlType("timestamp")
TIMESTAMPTZ = SqlType("timestamp with time zone")
INTERVAL = SqlType("interval")
UUID = SqlType("uuid")
MZ_TIMESTAMP = SqlType("mz_timestamp")
