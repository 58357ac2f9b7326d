"""The unique keys the planner knows of a relation, as Materialize derives them for
`CREATE SINK … KEY (…)` (an upsert sink's key must be one unless NOT ENFORCED).

Known, and nothing else: an upsert (or Debezium) source's key columns; and a view's where
it is one SELECT over a single relation (a catalog relation, a subquery or a CTE), as
Materialize's `keys` of its Reduce, Distinct, TopK, Map, Filter and Project: the outputs
that are its GROUP BY expressions, whatever expressions they are (an ordinal or an alias
names one); the outputs that are its DISTINCT ON expressions, or all its outputs under
DISTINCT; and, unless it aggregates all rows into one, the keys of the relation it reads
whose columns it outputs, under any name, whatever else it computes. A key output under
two names is a key under each. A table's PRIMARY KEY is not enforced (README), so a table
has none.
"""

from __future__ import annotations

from itertools import product

from sqlglot import exp

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.plan.queries import view_query

Key = tuple[int, ...]  # positions of a relation's output columns


def known_keys(item: Item, catalog: Catalog) -> list[tuple[str, ...]]:
    """The column sets known to be unique in `item`'s rows."""
    if item.kind == kinds.SOURCE:
        desc = item.source_desc
        return [desc.key_columns] if desc.envelope != "none" and desc.key_columns else []
    if item.kind in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
        plan = view_query(item, catalog)
        names = [c.name for c in plan.columns]
        return [tuple(names[i] for i in key) for key in _select_keys(plan.expression, {}, catalog)]
    return []


def _select_keys(select: exp.Expr, ctes: dict[str, exp.Expr], catalog: Catalog) -> list[Key]:
    if not isinstance(select, exp.Select) or select.args.get("joins") or select.args.get("laterals"):
        return []
    with_ = select.args.get("with_") or select.args.get("with")  # named per sqlglot version
    if with_ is not None:
        ctes = {**ctes, **{cte.alias_or_name: cte for cte in with_.expressions}}
    outputs = [p.this if isinstance(p, exp.Alias) else p for p in select.expressions]
    keys: list[Key] = []
    distinct = select.args.get("distinct")
    on = None if distinct is None else distinct.args.get("on")
    if distinct is not None and on is None:
        keys.append(tuple(range(len(outputs))))
    if on is not None:
        keys += _outputs_of(_elements(on), outputs)
    group = select.args.get("group")
    if group is not None:
        keys += _outputs_of(group.expressions, outputs)
    # A key of the input stays one through a filter, a map and a GROUP BY (its columns
    # output are grouped by); not through an aggregate of all rows or a set function.
    aggregated = group is None and (select.args.get("having") or any(o.find(exp.AggFunc) for o in outputs))
    if not aggregated and not any(o.find(exp.Explode, exp.UDTF) for o in outputs):
        keys += _passed_keys(select, outputs, ctes, catalog)
    return list(dict.fromkeys(keys))


def _elements(on: exp.Expr) -> list[exp.Expr]:
    """DISTINCT ON's expressions (a row of them once records are built)."""
    elements = on.expressions if isinstance(on, (exp.Tuple, exp.Struct)) else [on]
    return [e.this if isinstance(e, exp.Alias) else e.expression if isinstance(e, exp.PropertyEQ) else e for e in elements]


def _outputs_of(expressions: list[exp.Expr], outputs: list[exp.Expr]) -> list[Key]:
    """The keys made of the outputs that are `expressions` (all of them, or none is)."""
    shapes = [_shape(o) for o in outputs]
    choices = [[i for i, s in enumerate(shapes) if s == _shape(e)] for e in expressions]
    return list(product(*choices)) if all(choices) else []


def _shape(expression: exp.Expr) -> str:
    """An expression's SQL without column qualifiers: one relation is read, so equal."""
    copy = expression.copy()
    for column in copy.find_all(exp.Column):
        column.set("table", None)
    return copy.sql()


def _passed_keys(select: exp.Select, outputs, ctes, catalog: Catalog) -> list[Key]:
    """The keys of the relation `select` reads, through the outputs that pass its columns."""
    source = select.args.get("from_") or select.args.get("from")  # named per sqlglot version
    upstream = [] if source is None else _relation_keys(source.this, ctes, catalog)
    positions: dict[str, list[int]] = {}
    for i, output in enumerate(outputs):
        if isinstance(output, exp.Column):
            positions.setdefault(output.name, []).append(i)
    keys: list[Key] = []
    for key in upstream:
        if all(c in positions for c in key):
            keys += product(*(positions[c] for c in key))
    return keys


def _relation_keys(relation: exp.Expr, ctes, catalog: Catalog) -> list[tuple[str, ...]]:
    """The keys, by column name, of a FROM item: a CTE, a subquery or a catalog relation
    (an `ONLY ERRORS` read is renamed by the planner, and has none)."""
    if isinstance(relation, exp.Table) and relation.name in ctes and not relation.args.get("db"):
        # A CTE's body does not see itself: its name there is the catalog's.
        ctes, relation = {n: c for n, c in ctes.items() if n != relation.name}, ctes[relation.name]
    elif isinstance(relation, exp.Table):
        item = catalog.get(relation.name)
        return [] if item is None else known_keys(item, catalog)
    if not isinstance(relation, (exp.Subquery, exp.CTE)):
        return []
    query = relation.this
    alias = relation.args.get("alias")
    names = [p.alias_or_name for p in getattr(query, "expressions", [])]
    if alias is not None and alias.columns:  # `AS x(a, b)` renames the first outputs
        names[: len(alias.columns)] = [c.name for c in alias.columns]
    return [tuple(names[i] for i in key) for key in _select_keys(query, ctes, catalog)]
