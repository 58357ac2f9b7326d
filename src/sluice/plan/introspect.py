"""SHOW and EXPLAIN: results computed from the catalog alone."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.plan.names import resolve
from sluice.plan.plans import QueryPlan, RowsPlan, SinkStatusPlan, StatisticsPlan
from sluice.syntax import ast

_SHOWN_KINDS = {
    "SOURCES": (kinds.SOURCE,),
    "VIEWS": (kinds.VIEW,),
    "MATERIALIZED VIEWS": (kinds.MATERIALIZED_VIEW,),
    "TABLES": (kinds.TABLE, kinds.DEAD_LETTER_TABLE),
    "SINKS": (kinds.SINK,),
    "CONNECTIONS": (kinds.CONNECTION,),
    "SECRETS": (kinds.SECRET,),
}


def show_objects(statement: ast.ShowObjects, catalog: Catalog) -> RowsPlan | SinkStatusPlan:
    wanted = _SHOWN_KINDS[statement.kind]
    items = sorted((i for i in catalog if i.kind in wanted), key=lambda i: i.name)

    def name_of(item_id: str | None) -> str | None:
        return None if item_id is None else catalog.by_id(item_id).name

    columns: tuple[str, ...]
    rows: list[tuple[str | None, ...]]

    if statement.kind == "SOURCES":
        columns = ("name", "type", "timeline", "dead_letter_table")
        rows = [
            (i.name, "kafka", str(i.timeline), name_of(i.source_desc.dead_letter_table)) for i in items
        ]
    elif statement.kind == "TABLES":
        columns = ("name", "type", "source")
        rows = [
            (i.name, "dead-letter", name_of(i.dead_letter_desc.source))
            if i.kind == kinds.DEAD_LETTER_TABLE
            else (i.name, "table", None)
            for i in items
        ]
    elif statement.kind == "MATERIALIZED VIEWS":
        columns = ("name", "timeline")
        rows = [(i.name, timeline_text(i.timeline)) for i in items]
    elif statement.kind == "SINKS":
        sinks = tuple((i.name, "kafka", name_of(i.sink_desc.source)) for i in items)
        return SinkStatusPlan(sinks, tuple(i.id for i in items))
    elif statement.kind == "CONNECTIONS":
        columns = ("name", "type")
        rows = [(i.name, i.connection_desc.connection_type) for i in items]
    else:
        columns = ("name",)
        rows = [(i.name,) for i in items]
    return RowsPlan(columns, tuple(rows), "SHOW")


def show_columns(statement: ast.ShowColumns, catalog: Catalog) -> RowsPlan:
    item = resolve(catalog, statement.name, *kinds.RELATIONS)
    rows = tuple((c.name, c.nullable, c.type.display()) for c in item.columns)
    return RowsPlan(("name", "nullable", "type"), rows, "SHOW")


def show_source_statistics(statement: ast.ShowSourceStatistics, catalog: Catalog) -> StatisticsPlan:
    if statement.name is not None:
        return StatisticsPlan((resolve(catalog, statement.name, kinds.SOURCE).id,))
    return StatisticsPlan(tuple(item.id for item in catalog if item.kind == kinds.SOURCE))


def show_create(statement: ast.ShowCreate, catalog: Catalog) -> RowsPlan:
    kind = kinds.KIND_KEYWORDS[statement.kind]
    accepted = (kind, kinds.DEAD_LETTER_TABLE) if kind == kinds.TABLE else (kind,)
    item = resolve(catalog, statement.name, *accepted)
    return RowsPlan(("name", "create_sql"), ((item.name, item.create_sql),), "SHOW")


def timeline_text(timeline) -> str:
    return "none" if timeline is None else str(timeline)


def _columns_text(columns: tuple[Column, ...]) -> str:
    return ", ".join(
        f"{c.name} {c.type.display()}{'' if c.nullable else ' not null'}" for c in columns
    )


class ExplainWriter:
    """The readable plan tree of EXPLAIN PLAN, one output row per line."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.lines: list[str] = []

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def query(self, plan: QueryPlan, depth: int = 0) -> None:
        if plan.expression is None:  # SUBSCRIBE to a named relation: no query of its own
            self.line(depth, "Subscribe")
            self.reads([(r.item_id, r.errors) for r in plan.reads], depth + 1)
            return
        self.line(depth, "Query")
        self.line(depth + 1, f"columns: {_columns_text(plan.columns)}")
        self.line(depth + 1, f"timeline: {timeline_text(plan.timeline)}")
        self.reads([(r.item_id, r.errors) for r in plan.reads], depth + 1)

    def reads(self, reads: Sequence[tuple[str, str | None]], depth: int) -> None:
        if not reads:
            return
        self.line(depth, "reads:")
        for item_id, errors in reads:
            self.relation(self.catalog.by_id(item_id), errors, depth + 1)

    def relation(self, item: Item, errors: str | None, depth: int) -> None:
        modifier = f" ({errors} ERRORS)" if errors else ""
        self.line(depth, f"{item.kind} {item.name}{modifier}")
        depth += 1
        if item.kind == kinds.SOURCE:
            self.source(item, depth)
            return
        if item.kind == kinds.CONNECTION:
            connection = item.connection_desc
            where = ", ".join(connection.brokers) if connection.connection_type == kinds.KAFKA else connection.url
            self.line(depth, f"{connection.connection_type}: {where}")
            return
        if item.kind == kinds.SINK:
            sink = item.sink_desc
            self.line(depth, f"kafka: topic '{sink.topic}', envelope {sink.envelope}")
            self.reads([(sink.source, None)], depth)
            return
        if item.kind == kinds.DEAD_LETTER_TABLE:
            self.line(depth, f"errors of source {self.catalog.by_id(item.dead_letter_desc.source).name}")
        self.line(depth, f"timeline: {timeline_text(item.timeline)}")
        self.line(depth, f"columns: {_columns_text(item.columns)}")
        if item.kind in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
            relations = [
                (d, None) for d in item.depends_on if self.catalog.by_id(d).kind in kinds.RELATIONS
            ]
            self.reads(relations, depth)

    def source(self, item: Item, depth: int) -> None:
        desc = item.source_desc
        connection = self.catalog.by_id(desc.connection).name
        self.line(depth, f"kafka: topic '{desc.topic}' via connection {connection}")
        if desc.start_offsets:
            self.line(depth, f"start offsets: {', '.join(map(str, desc.start_offsets))}")
        if desc.start_timestamp is not None:
            self.line(depth, f"start timestamp: {desc.start_timestamp}")
        if desc.key_format is not None:
            self.line(depth, f"key format: {desc.key_format.name}")
        self.line(depth, f"value format: {desc.value_format.name}")
        self.line(depth, f"envelope: {desc.envelope}")
        policy = []
        if desc.inline_error_column is not None:
            policy.append(f"inline as {desc.inline_error_column}")
        if desc.propagate_value_errors:
            policy.append("propagate")
        if desc.envelope == "upsert":
            self.line(depth, f"value decoding errors: {', '.join(policy) or 'none'}")
        if desc.dead_letter_table is not None:
            dlq = self.catalog.by_id(desc.dead_letter_table).name
            self.line(depth, f"errors: redirected to dead-letter table {dlq}")
        else:
            self.line(depth, "errors: the source's errs (queries over it fail)")
        tolerance = "all" if desc.error_tolerance is None else str(desc.error_tolerance)
        self.line(depth, f"error tolerance: {tolerance}")
        self.line(
            depth,
            f"retry: transient faults for {_seconds(desc.retry_timeout_ms)}, "
            f"waiting at most {_seconds(desc.retry_delay_max_ms)} between attempts",
        )
        self.line(depth, f"timeline: {timeline_text(item.timeline)}")
        self.line(depth, f"columns: {_columns_text(item.columns)}")


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g}s"
