"""Planning: a pure function of (statement, catalog snapshot, gathered facts) → plan.

No I/O, no Spark, no clock. Name resolution, column derivation per format × envelope,
option validation and the timeline check all happen here; the session applies the plan.
"""

from __future__ import annotations

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import DuplicateObject, FeatureNotSupported
from sluice.plan import connections, ddl, introspect, writes
from sluice.plan.facts import Facts, registry_subjects
from sluice.plan.names import item_name, resolve
from sluice.plan.plans import (
    CreatePlan,
    DropPlan,
    NoticePlan,
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
from sluice.plan.queries import plan_query, relation_read
from sluice.plan.sources import plan_create_source
from sluice.plan.timelines import single_timeline
from sluice.syntax import ast

__all__ = [
    "CreatePlan",
    "DropPlan",
    "Facts",
    "NoticePlan",
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

_CREATES = {
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
    relation = catalog.by_id(sink.details.source)
    return _whole_relation(relation, catalog, relation.name, None, "SINK")


def _whole_relation(item: Item, catalog: Catalog, name_sql: str, span, status: str) -> QueryPlan:
    timeline = single_timeline(catalog, [item.id], span)
    return QueryPlan(
        f"SELECT * FROM {name_sql}", None, item.columns, (relation_read(item, None, catalog),), timeline, status
    )


def _explain(statement: ast.Explain, catalog: Catalog, facts: Facts) -> RowsPlan | PysparkPlan:
    if statement.stage == "PYSPARK":
        return _explain_pyspark(statement, catalog, facts)
    inner = statement.statement
    writer = introspect.ExplainWriter(catalog)
    if isinstance(inner, (ast.Select, ast.Subscribe)):
        query = plan_query(inner.body, catalog) if isinstance(inner, ast.Select) else (
            _subscribe_query(inner, catalog)
        )
        timeline = query.timeline
        writer.query(query)
    else:
        created = plan(inner, catalog, facts)
        if isinstance(created, NoticePlan):
            raise DuplicateObject(
                f"catalog item '{item_name(inner.name)}' already exists", span=inner.name.span
            )
        staged = catalog.with_items(created.items)
        writer = introspect.ExplainWriter(staged)
        item = created.items[0]
        timeline = _explained_timeline(item, staged)
        writer.line(0, f"{created.status} {item.name}")
        writer.relation(item, None, 1)
    if statement.stage == "TIMELINE":
        return RowsPlan(("timeline",), ((introspect.timeline_text(timeline),),), "EXPLAIN")
    return RowsPlan(("plan",), tuple((line,) for line in writer.lines), "EXPLAIN")


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
    if not isinstance(inner, (ast.CreateSource, ast.CreateView, ast.CreateSink)):
        words = inner.to_sql().split()
        what = " ".join(words[:2] if words[0] == "CREATE" else words[:1])
        raise FeatureNotSupported(f"EXPLAIN PYSPARK FOR {what} is not supported yet", span=statement.span)
    created = plan(inner, catalog, facts)
    if isinstance(created, NoticePlan):
        raise DuplicateObject(f"catalog item '{item_name(inner.name)}' already exists", span=inner.name.span)
    staged = catalog.with_items(created.items)
    item = created.items[0]
    if item.kind == kinds.SOURCE:
        return PysparkPlan(staged, item=item, span=statement.span)
    if item.kind == kinds.SINK:
        return PysparkPlan(staged, query=sink_query(item, staged), item=item, span=statement.span, ingests=True)
    return PysparkPlan(staged, query=relation_read(item, None, staged).query, item=item, span=statement.span)


def _explained_timeline(item, catalog: Catalog):
    if item.kind == kinds.SINK:
        return single_timeline(catalog, [item.details.source], None)
    return item.timeline
