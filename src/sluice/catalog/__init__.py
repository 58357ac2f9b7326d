"""Catalog items (connections, sources, tables, dead-letter tables, views, sinks), their
columns and timelines, and the durable store they live in. Imports nothing above it."""

from sluice.catalog.items import Item
from sluice.catalog.store import Catalog, DurableCatalog
from sluice.catalog.timeline import Timeline
from sluice.catalog.types import Column, SqlType

__all__ = ["Catalog", "Column", "DurableCatalog", "Item", "SqlType", "Timeline"]
