"""Text for `sluice plan`: each statement's plan, applied to a scratch catalog."""

from __future__ import annotations

from sluice.plan import CreatePlan, QueryPlan, RowsPlan, SubscribePlan, WritePlan
from sluice.plan.introspect import ExplainWriter
from sluice.session import Session
from sluice.syntax import ast
from sluice.values import value_text


def describe_plan(session: Session, statement: ast.Statement) -> str:
    planned = session.plan(statement)
    lines = [f"-- {statement.redacted().to_sql()}"]
    if isinstance(planned, (QueryPlan, SubscribePlan)):
        query = planned.query if isinstance(planned, SubscribePlan) else planned
        writer = ExplainWriter(session.catalog.current)
        writer.query(query)
        return "\n".join(lines + writer.lines)
    if isinstance(planned, WritePlan):
        table = session.catalog.current.by_id(planned.table_id).name
        return "\n".join(lines + [f"{planned.status} into table {table}"])
    result = session.apply(planned, statement)
    lines.append(result.status)
    if result.notice:
        lines.append(f"NOTICE:  {result.notice}")
    if isinstance(planned, CreatePlan):
        writer = ExplainWriter(session.catalog.current)
        for item in planned.items:
            writer.relation(item, None, 1)
        lines += writer.lines
    elif isinstance(planned, RowsPlan):
        lines.append("  " + " | ".join(result.columns))
        lines += ["  " + " | ".join(value_text(v) for v in row) for row in result.rows]
    return "\n".join(lines)

