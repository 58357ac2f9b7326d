"""A format's AST node → its description from the format registry (`catalog/formats.py`),
with what the node names resolved in the catalog: a schema registry connection, and the
schema it holds for a source's subject (fetched before planning, in `Facts`).
"""

from __future__ import annotations

from sluice.catalog import items as kinds
from sluice.catalog.formats import FormatDesc, format_of
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.errors import InvalidParameterValue, InvalidSchema
from sluice.plan.facts import Facts
from sluice.plan.names import item_name, resolve
from sluice.syntax import ast


def source_format(fmt: ast.Format, side: str, topic: str, catalog: Catalog, facts: Facts) -> FormatDesc:
    """The decoding of one side ("key" or "value") of the messages of `topic`."""
    cls = format_of(fmt)
    connection = cls.registry_of(fmt)
    if connection is None:
        return cls.for_source(fmt, None, None)
    registry = _registry(connection, catalog)
    subject = f"{topic}-{side}"
    fetched = facts.schemas.get((item_name(connection), subject))
    if fetched is None:
        raise InvalidSchema(f"no schema for subject '{subject}' in schema registry {registry.name}", span=fmt.span)
    return cls.for_source(fmt, registry.id, fetched)


def sink_format(fmt: ast.Format, columns: tuple[Column, ...], catalog: Catalog) -> FormatDesc:
    """The encoding of a sink's `columns`."""
    cls = format_of(fmt)
    connection = cls.registry_of(fmt)
    registry = None if connection is None else _registry(connection, catalog).id
    return cls.for_sink(columns, fmt.span, registry)


def _registry(connection: ast.ObjectName, catalog: Catalog) -> Item:
    registry = resolve(catalog, connection, kinds.CONNECTION)
    if registry.connection_desc.connection_type != kinds.SCHEMA_REGISTRY:
        raise InvalidParameterValue(
            f"{registry.name} is not a schema registry connection", span=connection.span
        )
    return registry
