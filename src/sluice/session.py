"""`Session`: owns the durable catalog (and, later, the Spark session); executes SQL.

Each statement goes parse → gather external facts (schema registry look-ups) → plan
(pure) → apply. DDL changes the catalog in one crash-safe commit; SHOW and EXPLAIN return
rows; SELECT reads a snapshot of its sources on Spark (started only then). SUBSCRIBE and
writes are planned — so their errors are reported — and then refused until they exist.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.catalog import items as kinds
from sluice.catalog.store import DurableCatalog
from sluice.errors import ExternalSystemError, FeatureNotSupported
from sluice.kafka.registry import SchemaRegistry
from sluice.plan import (
    CreatePlan,
    DropPlan,
    Facts,
    NoticePlan,
    Plan,
    QueryPlan,
    RowsPlan,
    plan,
    registry_subjects,
)
from sluice.plan.facts import RegistrySchema
from sluice.syntax import ast, parse, parse_one


@dataclass
class Result:
    status: str
    columns: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notice: str | None = None


class Session:
    def __init__(self, data_dir: str | Path | None = None) -> None:
        self._temporary = None
        if data_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="sluice-")
            data_dir = self._temporary.name
        self.data_dir = Path(data_dir)
        self.catalog = DurableCatalog(self.data_dir)

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def execute(self, sql: str) -> Result:
        return self.execute_statement(parse_one(sql))

    def execute_script(self, text: str) -> list[Result]:
        """Every statement of the script, in order; a syntax error anywhere runs nothing."""
        return [self.execute_statement(s) for s in parse(text)]

    def plan(self, statement: ast.Statement):
        return plan(statement, self.catalog.current, self._facts(statement))

    def execute_statement(self, statement: ast.Statement) -> Result:
        return self.apply(self.plan(statement), statement)

    def apply(self, planned: Plan, statement: ast.Statement) -> Result:
        """Carry out a plan made by `plan` from the current catalog."""
        current = self.catalog.current
        if isinstance(planned, CreatePlan):
            self.catalog.commit(current.with_items(planned.items))
            return Result(planned.status)
        if isinstance(planned, DropPlan):
            self.catalog.commit(current.without(planned.ids))
            return Result(planned.status)
        if isinstance(planned, NoticePlan):
            return Result(planned.status, notice=planned.notice)
        if isinstance(planned, RowsPlan):
            return Result(planned.status, planned.columns, list(planned.rows))
        if isinstance(planned, QueryPlan):
            return self._select(planned)
        raise FeatureNotSupported(
            f"executing {planned.status} is not implemented yet",
            span=statement.span,
            detail="the statement was planned successfully",
        )

    def _select(self, planned: QueryPlan) -> Result:
        """A snapshot: every source read up to the offsets current when the query starts."""
        from sluice.render.snapshot import run_snapshot  # Spark only when data is needed

        columns, rows = run_snapshot(planned, self.catalog.current)
        return Result("SELECT", columns, rows)

    def _facts(self, statement: ast.Statement) -> Facts:
        schemas = {}
        for connection_name, subject, span in registry_subjects(statement, self.catalog.current):
            item = self.catalog.current.get(connection_name)
            if item is None or item.kind != kinds.CONNECTION:
                continue  # the planner reports the bad reference
            if item.details.connection_type != kinds.SCHEMA_REGISTRY:
                continue
            properties = dict(item.details.properties)
            registry = SchemaRegistry(
                item.details.url,
                _literal(properties.get("USERNAME")),
                _literal(properties.get("PASSWORD")),
            )
            try:
                schema_id, schema = registry.latest(subject)
            except ExternalSystemError as e:
                e.span = e.span or span
                raise
            schemas[(connection_name, subject)] = RegistrySchema(schema_id, schema)
        return Facts(schemas)


def _literal(sql: str | None) -> str | None:
    """A string option's value from its canonical SQL ('it''s' → it's); secrets are not read."""
    if sql is None or not sql.startswith("'"):
        return None
    return sql[1:-1].replace("''", "'")
