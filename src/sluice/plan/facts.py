"""Facts from outside the catalog that a statement needs, gathered before planning.

Planning is pure, so I/O happens first: the session asks `registry_subjects` which schema
registry subjects a statement reads, fetches them, and passes them in as `Facts` — with,
for a CREATE SOURCE, its topic's low watermarks at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.catalog.formats import RegistrySchema, format_of
from sluice.errors import Span
from sluice.plan.names import item_name
from sluice.syntax import ast


@dataclass(frozen=True)
class Facts:
    # (schema registry connection name, subject) → its latest schema
    schemas: dict[tuple[str, str], RegistrySchema] = field(default_factory=dict)
    # (partition, low watermark) of a new source's topic: where its history begins.
    topic_lows: tuple[tuple[int, int], ...] = ()


def created_source(statement: ast.Statement) -> ast.CreateSource | None:
    """The CREATE SOURCE `statement` is or explains, if any."""
    inner = statement.statement if isinstance(statement, ast.Explain) else statement
    return inner if isinstance(inner, ast.CreateSource) else None


def registry_subjects(statement: ast.Statement) -> list[tuple[str, str, Span | None]]:
    """(registry connection name, subject, span of the format) that a CREATE SOURCE needs."""
    source = created_source(statement)
    if source is None or source.format is None:
        return []
    topic = next((o.string.value for o in source.kafka_options if o.name == "TOPIC"), None)
    if topic is None:
        return []
    spec = source.format
    sides = (
        [("key", spec.key), ("value", spec.value)]
        if isinstance(spec, ast.KeyValueFormat)
        else [("value", spec.format)]
    )
    connections = [(side, f, format_of(f).registry_of(f)) for side, f in sides]
    return [(item_name(c), f"{topic}-{side}", f.span) for side, f, c in connections if c is not None]
