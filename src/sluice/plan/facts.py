"""Facts from outside the catalog that a statement needs, gathered before planning.

Planning is pure, so I/O happens first: the session asks `registry_subjects` which schema
registry subjects a statement reads, fetches them, and passes them in as `Facts` — with,
for a CREATE SOURCE, its topic's low watermarks at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.errors import Span
from sluice.plan.names import item_name
from sluice.syntax import ast


@dataclass(frozen=True)
class RegistrySchema:
    id: int
    schema: str  # Avro schema, JSON text


@dataclass(frozen=True)
class Facts:
    # (schema registry connection name, subject) → its latest schema
    schemas: dict[tuple[str, str], RegistrySchema] = field(default_factory=dict)
    # (partition, low watermark) of a new source's topic: where its history begins.
    topic_lows: tuple[tuple[int, int], ...] = ()


def registry_subjects(statement: ast.Statement) -> list[tuple[str, str, Span | None]]:
    """(registry connection name, subject, span of the format) that a CREATE SOURCE needs."""
    if isinstance(statement, ast.Explain):
        statement = statement.statement
    if not isinstance(statement, ast.CreateSource) or statement.format is None:
        return []
    topic = next(
        (o.value.value for o in statement.kafka_options if o.name == "TOPIC"),
        None,
    )
    if not isinstance(topic, str):
        return []
    spec = statement.format
    sides = (
        [("key", spec.key), ("value", spec.value)]
        if isinstance(spec, ast.KeyValueFormat)
        else [("value", spec.format)]
    )
    return [
        (item_name(f.schema.connection), f"{topic}-{side}", f.span)
        for side, f in sides
        if isinstance(f, ast.AvroFormat) and isinstance(f.schema, ast.CsrSchema)
    ]
