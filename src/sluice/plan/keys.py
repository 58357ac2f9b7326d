"""The unique keys the planner knows of a relation, as Materialize derives them for
`CREATE SINK … KEY (…)` (an upsert sink's key must be one unless NOT ENFORCED).

Known, and nothing else: an upsert (or Debezium) source's key columns; a view's where it
is one SELECT over a single relation — its GROUP BY columns it outputs, else the keys of
the relation it reads whose columns it passes through unchanged, or all its columns under
DISTINCT. A table's PRIMARY KEY is not enforced (README), so a table has none.
"""

from __future__ import annotations

from sqlglot import exp

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.plan.plans import QueryPlan
from sluice.plan.queries import relation_read


def known_keys(item: Item, catalog: Catalog) -> list[tuple[str, ...]]:
    """The column sets known to be unique in `item`'s rows."""
    if item.kind == kinds.SOURCE:
        desc = item.details
        return [desc.key_columns] if desc.envelope != "none" and desc.key_columns else []
    if item.kind in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
        return _query_keys(relation_read(item, None, catalog).query, catalog)
    return []


def _query_keys(plan: QueryPlan, catalog: Catalog) -> list[tuple[str, ...]]:
    select = plan.expression
    if not isinstance(select, exp.Select) or len(plan.reads) != 1 or select.args.get("joins"):
        return []
    source = select.args.get("from_") or select.args.get("from")  # named per sqlglot version
    if source is None or not isinstance(source.this, exp.Table) or select.args.get("laterals"):
        return []
    names = [c.name for c in plan.columns]
    passed = {}  # column of the relation read → the output name it passes through as
    for name, projection in zip(names, select.expressions, strict=False):
        column = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(column, exp.Column):
            passed.setdefault(column.name, name)
    if select.args.get("distinct") is not None:
        return [tuple(names)]
    group = select.args.get("group")
    if group is not None:
        grouped = group.expressions
        if all(isinstance(g, exp.Column) and g.name in passed for g in grouped):
            return [tuple(passed[g.name] for g in grouped)]
        return []
    if any(projection.find(exp.AggFunc) for projection in select.expressions):
        return []
    (read,) = plan.reads
    if read.errors == "ONLY":
        return []
    upstream = known_keys(catalog.by_id(read.item_id), catalog)
    return [tuple(passed[c] for c in key) for key in upstream if all(c in passed for c in key)]
