"""Planning: a pure function of (statement, catalog snapshot, gathered facts) → plan.

No I/O, no Spark, no clock. Name resolution, column derivation per format × envelope,
option validation and the timeline check all happen here; the session applies the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import DuplicateObject, FeatureNotSupported
from sluice.plan import connections, ddl, explain, introspect, writes
from sluice.plan.facts import Facts, registry_subjects
from sluice.plan.names import item_name, resolve
from sluice.plan.plans import (
    CreatePlan,
    DropPlan,
    NoticePlan,
    PhysicalPlan,
    Plan,
    PysparkPlan,
    QueryPlan,
    RowsPlan,
    SecretPlan,
    SinkStatusPlan,
    StatisticsPlan,
    SubscribePlan,
    ValidatePlan,
    WritePlan,
)
from sluice.plan.queries import plan_query, relation_read, view_query
from sluice.plan.sources import plan_create_source
from sluice.plan.timelines import single_timeline
from sluice.syntax import ast

__all__ = [
    "CreatePlan",
    "DropPlan",
    "Facts",
    "NoticePlan",
    "PhysicalPlan",
    "Plan",
    "PysparkPlan",
    "QueryPlan",
    "RowsPlan",
    "SecretPlan",
    "SinkStatusPlan",
    "StatisticsPlan",
    "SubscribePlan",
    "ValidatePlan",
    "WritePlan",
    "plan",
    "registry_subjects",
    "sink_query",
]

# The creations planned alike (each function takes the statement its key names).
_CREATES: dict[type[ast.Statement], tuple[str, Callable[[Any, Catalog], Item]]] = {
    ast.CreateConnection: ("CONNECTION", connections.plan_create_connection),
    ast.CreateTable: ("TABLE", ddl.plan_create_table),
    ast.CreateSink: ("SINK", ddl.plan_create_sink),
    ast.CreateIndex: ("INDEX", ddl.plan_create_index),
}


def plan(statement: ast.Statement, catalog: Catalog, facts: Facts | None = None) -> Plan:
    facts = facts or Facts()
    if isinstance(statement, ast.Explain):
        return _explain(statement, catalog, facts)
    # A connection is validated unless WITH (VALIDATE = false), as Materialize's are.
    if isinstance(statement, ast.CreateConnection) and statement.validate is not False:
        created = _create(
            statement, "CREATE CONNECTION", catalog, lambda: (connections.plan_create_connection(statement, catalog),)
        )
        if isinstance(created, NoticePlan):
            return created
        return ValidatePlan(created.items[0], created.status, created)
    if isinstance(statement, ast.ValidateConnection):
        return ValidatePlan(resolve(catalog, statement.name, kinds.CONNECTION), "VALIDATE CONNECTION")
    if isinstance(statement, tuple(_CREATES)):
        kind, build = _CREATES[type(statement)]
        return _create(statement, f"CREATE {kind}", catalog, lambda: (build(statement, catalog),))
    if isinstance(statement, ast.CreateSecret):
        return connections.plan_create_secret(statement, catalog)
    if isinstance(statement, ast.AlterSecret):
        return connections.plan_alter_secret(statement, catalog)
    if isinstance(statement, ast.CreateSource):
        return _create(
            statement, "CREATE SOURCE", catalog, lambda: plan_create_source(statement, catalog, facts)
        )
    if isinstance(statement, ast.CreateView):
        kind = "MATERIALIZED VIEW" if statement.materialized else "VIEW"
        return _create(
            statement, f"CREATE {kind}", catalog, lambda: (ddl.plan_create_view(statement, catalog),)
        )
    if isinstance(statement, ast.Select):
        return plan_query(statement.body, catalog)
    if isinstance(statement, ast.Subscribe):
        return SubscribePlan(_subscribe_query(statement, catalog))
    if isinstance(statement, (ast.Insert, ast.Update, ast.Delete)):
        return writes.plan_write(statement, catalog)
    if isinstance(statement, ast.Drop):
        return ddl.plan_drop(statement, catalog)
    if isinstance(statement, ast.ShowObjects):
        return introspect.show_objects(statement, catalog)
    if isinstance(statement, ast.ShowColumns):
        return introspect.show_columns(statement, catalog)
    if isinstance(statement, ast.ShowCreate):
        return introspect.show_create(statement, catalog)
    if isinstance(statement, ast.ShowSourceStatistics):
        return introspect.show_source_statistics(statement, catalog)
    raise FeatureNotSupported(f"{type(statement).__name__} is not supported", span=statement.span)


def _create(statement, status: str, catalog: Catalog, build) -> CreatePlan | NoticePlan:
    if statement.if_not_exists:
        name = item_name(statement.name)
        if catalog.get(name) is not None:
            return NoticePlan(f"catalog item '{name}' already exists, skipping", status)
    return CreatePlan(build(), status)


def _subscribe_query(statement: ast.Subscribe, catalog: Catalog) -> QueryPlan:
    if isinstance(statement.target, ast.QueryBody):
        return plan_query(statement.target, catalog, "SUBSCRIBE")
    item = resolve(catalog, statement.target, *kinds.RELATIONS)
    return _whole_relation(item, catalog, statement.target.to_sql(), statement.target.span, "SUBSCRIBE")


def sink_query(sink: Item, catalog: Catalog) -> QueryPlan:
    """The query a sink's job evaluates: its whole relation."""
    relation = catalog.by_id(sink.sink_desc.source)
    return _whole_relation(relation, catalog, relation.name, None, "SINK")


def _whole_relation(item: Item, catalog: Catalog, name_sql: str, span, status: str) -> QueryPlan:
    timeline = single_timeline(catalog, [item.id], span)
    return QueryPlan(
        f"SELECT * FROM {name_sql}", None, item.columns, (relation_read(item, None, catalog),), timeline, status
    )


# EXPLAIN stages: the optimized plan (the default), Spark's physical plan, the dataflow's
# timeline, the PySpark program. Materialize's other stages have no counterpart here.
_OPTIMIZED = (None, "PLAN", "OPTIMIZED PLAN")
_MODIFIERS = {"reads", explain.HUMANIZED}


def _explain(statement: ast.Explain, catalog: Catalog, facts: Facts) -> RowsPlan | PysparkPlan | PhysicalPlan:
    _check_form(statement)
    if statement.stage == "PYSPARK":
        return _explain_pyspark(statement, catalog, facts)
    explained = _explained(statement, catalog, facts)
    if statement.stage == "TIMELINE":
        return RowsPlan(("timeline",), ((introspect.timeline_text(explained.timeline),),), "EXPLAIN")
    if statement.stage == "PHYSICAL PLAN":
        if explained.query is None or explained.subscribes or (explained.item and explained.item.kind == kinds.SINK):
            raise FeatureNotSupported(
                f"EXPLAIN PHYSICAL PLAN FOR {_what(statement.statement)} is not supported yet",
                span=statement.span,
                hint="EXPLAIN PHYSICAL PLAN shows what Spark runs for a SELECT or a view",
            )
        return PhysicalPlan(explained.query, span=statement.span)
    lines: list[str] = []
    if explained.query is not None:
        item = explained.item
        # A named object's plan is headed by its name, as Materialize heads a view's.
        header = "Explained Query" if item is None else f"{explain.SCHEMA}.{item.name}"
        writer = explain.PlanWriter(explained.catalog, humanized=explain.HUMANIZED in statement.modifiers)
        try:
            lines = writer.explain(header, explained.query, item)
        except FeatureNotSupported as e:
            e.span = e.span or statement.span
            raise
    if explained.query is None or "reads" in statement.modifiers:
        lines += explained.reads.lines
    return RowsPlan(("Optimized Plan",), tuple((line,) for line in lines), "EXPLAIN")


def _check_form(statement: ast.Explain) -> None:
    """What sluice does not explain is refused by name (0A000), never half-shown."""
    stage = statement.stage
    if stage not in (*_OPTIMIZED, "PHYSICAL PLAN", "PYSPARK", "TIMELINE"):
        raise FeatureNotSupported(
            f"EXPLAIN {stage} is not supported",
            span=statement.span,
            hint="sluice explains the OPTIMIZED PLAN (the default), the PHYSICAL PLAN (Spark's), "
            "the TIMELINE and the PYSPARK program",
        )
    if statement.format not in (None, "TEXT", "VERBOSE TEXT"):
        raise FeatureNotSupported(f"EXPLAIN AS {statement.format} is not supported", span=statement.span)
    allowed = _MODIFIERS if stage in _OPTIMIZED else set()
    for modifier in statement.modifiers:
        if modifier not in allowed:
            where = "" if stage in _OPTIMIZED else f" {stage}"
            raise FeatureNotSupported(
                f"EXPLAIN{where} WITH ({modifier}) is not supported",
                span=statement.span,
                hint=None if stage not in _OPTIMIZED else "EXPLAIN's modifiers: humanized expressions, reads",
            )
    if statement.format is not None and stage in ("PYSPARK", "TIMELINE"):
        raise FeatureNotSupported(f"EXPLAIN {stage} AS {statement.format} is not supported", span=statement.span)


@dataclass
class _Explained:
    """What an EXPLAIN explains: the query it evaluates (none for a source), the item it
    creates or names, the catalog holding it, its timeline, the old description of its reads."""

    query: QueryPlan | None
    item: Item | None
    catalog: Catalog
    timeline: object
    reads: introspect.ExplainWriter
    subscribes: bool = False


def _explained(statement: ast.Explain, catalog: Catalog, facts: Facts) -> _Explained:
    inner = statement.statement
    writer = introspect.ExplainWriter(catalog)
    if isinstance(inner, (ast.Select, ast.Subscribe)):
        subscribes = isinstance(inner, ast.Subscribe)
        query = _subscribe_query(inner, catalog) if isinstance(inner, ast.Subscribe) else plan_query(inner.body, catalog)
        writer.query(query)
        return _Explained(query, None, catalog, query.timeline, writer, subscribes)
    if isinstance(inner, ast.ExplainView):
        kind = kinds.MATERIALIZED_VIEW if inner.materialized else kinds.VIEW
        item = resolve(catalog, inner.name, kind)
        writer.relation(item, None, 0)
        return _Explained(view_query(item, catalog), item, catalog, item.timeline, writer)
    created = _created(inner, catalog, facts)
    staged = catalog.with_items(created.items)
    writer = introspect.ExplainWriter(staged)
    item = created.items[0]
    writer.line(0, f"{created.status} {item.name}")
    writer.relation(item, None, 1)
    created_query: QueryPlan | None = None  # none for a source
    if item.kind == kinds.SINK:
        created_query = sink_query(item, staged)
    elif item.kind in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
        created_query = view_query(item, staged)
    return _Explained(created_query, item, staged, _explained_timeline(item, staged), writer)


def _created(inner: ast.CreateView | ast.CreateSink | ast.CreateSource, catalog: Catalog, facts: Facts) -> CreatePlan:
    """The creation an EXPLAIN explains: its name must be free, IF NOT EXISTS or not."""
    created = plan(inner, catalog, facts)
    if not isinstance(created, CreatePlan):  # IF NOT EXISTS found the name taken
        raise DuplicateObject(f"catalog item '{item_name(inner.name)}' already exists", span=inner.name.span)
    return created


def _what(inner) -> str:
    words = inner.to_sql().split()
    return " ".join(words[:2] if words[0] == "CREATE" else words[:1])


def _explain_pyspark(statement: ast.Explain, catalog: Catalog, facts: Facts) -> PysparkPlan:
    """A SELECT's program, a view's query's, what a SUBSCRIBE or a sink evaluates at each
    change, or how a source is read. The rest is refused by name: what it would print is
    not rendered from this plan alone."""
    inner = statement.statement
    if isinstance(inner, ast.Select):
        return PysparkPlan(catalog, query=plan_query(inner.body, catalog), span=statement.span)
    if isinstance(inner, ast.Subscribe):
        query = _subscribe_query(inner, catalog)
        return PysparkPlan(catalog, query=query, span=statement.span, ingests=True)
    if isinstance(inner, ast.ExplainView):
        explained = _explained(statement, catalog, facts)
        return PysparkPlan(catalog, query=explained.query, item=explained.item, span=statement.span)
    if not isinstance(inner, (ast.CreateSource, ast.CreateView, ast.CreateSink)):
        raise FeatureNotSupported(f"EXPLAIN PYSPARK FOR {_what(inner)} is not supported yet", span=statement.span)
    created = _created(inner, catalog, facts)
    staged = catalog.with_items(created.items)
    item = created.items[0]
    if item.kind == kinds.SOURCE:
        return PysparkPlan(staged, item=item, span=statement.span)
    if item.kind == kinds.SINK:
        return PysparkPlan(staged, query=sink_query(item, staged), item=item, span=statement.span, ingests=True)
    return PysparkPlan(staged, query=view_query(item, staged), item=item, span=statement.span)


def _explained_timeline(item, catalog: Catalog):
    if item.kind == kinds.SINK:
        return single_timeline(catalog, [item.sink_desc.source], None)
    return item.timeline
