"""`Session`: owns the durable catalog (and, later, the Spark session); executes SQL.

A session holds its data directory's lock from before it reads the catalog until it
closes: one session per data directory (a second, in this process or another, is
refused). Each statement goes parse → gather external facts (schema registry look-ups) →
plan (pure) → apply. DDL changes the catalog in one crash-safe commit (a secret's value
goes to the secret store, outside the catalog); SHOW and EXPLAIN return
rows; SELECT reads its sources and tables on Spark (started only then) — a snapshot from
Kafka, or, for continuously ingested sources, their committed batches once caught up —
and INSERT/UPDATE/DELETE rewrite a table's stored rows. SUBSCRIBE streams changes
(`subscribe`); as a statement it returns the current contents. Each public method is an
entry point: whatever fails in it reaches the caller as a `SqlError`.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.catalog import items as kinds
from sluice.catalog.lock import DataDirectoryLock
from sluice.catalog.secrets import SecretStore, connection_options, registry_login
from sluice.catalog.store import DurableCatalog
from sluice.errors import (
    ExternalSystemError,
    FeatureNotSupported,
    UndefinedObject,
    WrongObjectType,
    user_errors,
)
from sluice.kafka.registry import SchemaRegistry
from sluice.plan import (
    CreatePlan,
    DropPlan,
    Facts,
    NoticePlan,
    Plan,
    QueryPlan,
    RowsPlan,
    SecretPlan,
    StatisticsPlan,
    SubscribePlan,
    WritePlan,
    plan,
    registry_subjects,
)
from sluice.plan.facts import RegistrySchema
from sluice.syntax import ast, parse, parse_one
from sluice.tables import TableStore


@dataclass
class Result:
    status: str
    columns: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notice: str | None = None


class Session:
    """`check_kafka=False` never talks to Kafka for DDL: sources are planned without asking
    whether their topic exists, and a materialized view's ingestion starts with the first
    statement that reads data rather than at CREATE (`sluice plan`, tests of planning)."""

    @user_errors
    def __init__(self, data_dir: str | Path | None = None, *, check_kafka: bool = True) -> None:
        self.check_kafka = check_kafka
        self._temporary = None
        if data_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="sluice-")
            data_dir = self._temporary.name
        self.data_dir = Path(data_dir)
        self._lock = DataDirectoryLock(self.data_dir)
        try:
            self.secrets = SecretStore(self.data_dir)
            self.catalog = DurableCatalog(self.data_dir, self.secrets)
            self.secrets.keep_only(i.id for i in self.catalog.current if i.kind == kinds.SECRET)
        except BaseException:
            self._lock.release()
            raise
        self.tables = TableStore(self.data_dir)
        self._live = None  # the continuous ingestions (render.ingest.Streams), once needed

    def _streams(self):
        if self._live is None:
            from sluice.render.ingest import Streams  # Spark only when data is needed

            self._live = Streams(self.data_dir)
        return self._live

    def close(self) -> None:
        if self._live is not None:
            self._live.close()
            self._live = None
        self._lock.release()
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @user_errors
    def execute(self, sql: str) -> Result:
        return self.execute_statement(parse_one(sql))

    @user_errors
    def execute_script(self, text: str) -> list[Result]:
        """Every statement of the script, in order; a syntax error anywhere runs nothing."""
        return [self.execute_statement(s) for s in parse(text)]

    @user_errors
    def plan(self, statement: ast.Statement):
        return plan(statement, self.catalog.current, self._facts(statement))

    @user_errors
    def execute_statement(self, statement: ast.Statement) -> Result:
        return self.apply(self.plan(statement), statement)

    @user_errors
    def apply(self, planned: Plan, statement: ast.Statement) -> Result:
        """Carry out a plan made by `plan` from the current catalog."""
        current = self.catalog.current
        if isinstance(planned, CreatePlan):
            self.catalog.commit(current.with_items(planned.items))
            views = [i.id for i in planned.items if i.kind == kinds.MATERIALIZED_VIEW]
            if views and self.check_kafka:
                from sluice.render.executor import start_ingestion

                # A materialized view runs from its creation: its sources ingest continuously.
                updated = self.catalog.current
                start_ingestion(self._streams(), updated, updated.upstream_sources(views))
            return Result(planned.status)
        if isinstance(planned, SecretPlan):
            self.secrets.write(planned.secret_id, planned.value)
            if planned.item is not None:
                try:
                    self.catalog.commit(current.with_items([planned.item]))
                except BaseException:
                    self.secrets.remove([planned.secret_id])
                    raise
            return Result(planned.status)
        if isinstance(planned, DropPlan):
            self.catalog.commit(current.without(planned.ids))
            self.secrets.remove(i for i in planned.ids if current.by_id(i).kind == kinds.SECRET)
            for item_id in planned.ids:
                self.tables.drop(current.by_id(item_id))
                if self._live is not None:
                    self._live.drop(item_id)
                shutil.rmtree(self.data_dir / "streams" / item_id, ignore_errors=True)
            return Result(planned.status)
        if isinstance(planned, NoticePlan):
            return Result(planned.status, notice=planned.notice)
        if isinstance(planned, RowsPlan):
            return Result(planned.status, planned.columns, list(planned.rows))
        if isinstance(planned, QueryPlan):
            return self._select(planned)
        if isinstance(planned, StatisticsPlan):
            from sluice.render.executor import source_statistics  # Spark only when needed

            rows = source_statistics(self._streams(), current, planned.source_ids)
            return Result(planned.status, planned.columns, rows)
        if isinstance(planned, SubscribePlan):
            # As a statement, SUBSCRIBE shows the current contents; `subscribe` streams on.
            changes = self._subscription(planned)
            return Result(planned.status, changes.columns, changes.snapshot())
        if isinstance(planned, WritePlan):
            from sluice.render.executor import run_write  # Spark only when data is needed

            return Result(run_write(planned, current, self.tables, {}))
        raise FeatureNotSupported(
            f"executing {planned.status} is not implemented yet",
            span=statement.span,
            detail="the statement was planned successfully",
        )

    @user_errors
    def subscribe(self, sql: str):
        """`SUBSCRIBE x` or `SUBSCRIBE (query)` as an iterator of `(mz_timestamp, mz_diff,
        columns…)` rows: the current contents, then changes as they are ingested, until
        `close()`; an error in the relation ends it by raising that error."""
        statement = parse_one(sql)
        planned = self.plan(statement)
        if not isinstance(planned, SubscribePlan):
            raise WrongObjectType("expected a SUBSCRIBE statement", span=statement.span)
        return self._subscription(planned)

    def _subscription(self, planned: SubscribePlan):
        from sluice.render.executor import subscription  # Spark only when data is needed

        return subscription(planned.query, self.catalog.current, self.tables, self._streams())

    def _select(self, planned: QueryPlan) -> Result:
        """A snapshot: every source read up to the offsets current when the query starts."""
        from sluice.render.executor import live_stores, run_snapshot  # Spark only when needed

        current = self.catalog.current
        stores = live_stores(self._streams(), current, [r.item_id for r in planned.reads])
        columns, rows = run_snapshot(planned, current, self.tables, stores)
        return Result("SELECT", columns, rows)

    def _facts(self, statement: ast.Statement) -> Facts:
        topic_lows = self._check_topic(statement) if self.check_kafka else ()
        schemas = {}
        for connection_name, subject, span in registry_subjects(statement):
            item = self.catalog.current.get(connection_name)
            if item is None or item.kind != kinds.CONNECTION:
                continue  # the planner reports the bad reference
            if item.details.connection_type != kinds.SCHEMA_REGISTRY:
                continue
            login = registry_login(item.details, self.catalog.current)
            registry = SchemaRegistry(item.details.url, *(login or ()))
            try:
                schema_id, schema = registry.latest(subject)
            except ExternalSystemError as e:
                e.span = e.span or span
                raise
            schemas[(connection_name, subject)] = RegistrySchema(schema_id, schema)
        return Facts(schemas, topic_lows)


    def _check_topic(self, statement: ast.Statement) -> tuple[tuple[int, int], ...]:
        """A source's topic must exist when the source is created: its partitions' low
        watermarks."""
        if isinstance(statement, ast.Explain):
            statement = statement.statement
        if not isinstance(statement, ast.CreateSource):
            return ()
        topic = next((o.value for o in statement.kafka_options if o.name == "TOPIC"), None)
        connection = self.catalog.current.get(statement.connection.name)
        if topic is None or connection is None or connection.kind != kinds.CONNECTION:
            return ()  # the planner reports these
        if connection.details.connection_type != kinds.KAFKA:
            return ()
        from sluice.kafka.client import KafkaReadError, TopicMissing, connection_config, watermarks

        brokers = ",".join(connection.details.brokers)
        config = connection_config(connection_options(connection.details, self.catalog.current).all())
        try:
            marks = watermarks(brokers, topic.value, config)
        except TopicMissing:
            raise UndefinedObject(
                "Topic does not exist",
                span=topic.span,
                detail=f"topic '{topic.value}' is not on connection {connection.name} ({brokers})",
                hint=f"create it: \\produce {topic.value} --create in the REPL, or"
                f" sluice kafka create-topic {topic.value} --broker {brokers}",
            ) from None
        except KafkaReadError as e:
            raise ExternalSystemError(
                f"cannot read topic '{topic.value}' from connection {connection.name}: {e}",
                span=statement.connection.span,
            ) from None
        return tuple((partition, low) for partition, (low, _) in sorted(marks.items()))

