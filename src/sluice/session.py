"""`Session`: owns a data directory's durable catalog, tables and streams; executes SQL.

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

Opening sets aside the files of items the catalog does not name (`orphans`); what it
did, and anything else a user must hear of the opening, is in `notices`, which the front
ends print as warnings.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.catalog import items as kinds
from sluice.catalog.lock import DataDirectoryLock
from sluice.catalog.secrets import SecretStore
from sluice.catalog.store import DurableCatalog
from sluice.errors import FeatureNotSupported, InternalError, WrongObjectType, user_errors
from sluice.lookups import facts, validate
from sluice.plan import (
    CreatePlan,
    DropPlan,
    Facts,
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
    plan,
    sink_query,
)
from sluice.plan.introspect import ExplainWriter
from sluice.plan.names import resolve
from sluice.spark.settings import SparkSettings, configure, current_log
from sluice.spark.settings import running as spark_running
from sluice.spark.settings import starting as spark_starting
from sluice.storage.controller import Controller
from sluice.storage.location import data_location, default_data_uri
from sluice.storage.orphans import set_aside
from sluice.syntax import ast, parse, parse_one
from sluice.values import value_text


@dataclass(frozen=True)
class Progress:
    """What a running statement is waiting on: sources catching up with their topics
    (name, offsets read, offsets to read) and Spark tasks (done, all), if any."""

    catch_up: tuple[tuple[str, int, int], ...] = ()
    tasks: tuple[int, int] | None = None
    spark_starting: bool = False


@dataclass
class Result:
    status: str
    columns: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notice: str | None = None


class Session:
    """`check_kafka=False` never talks to Kafka for DDL: sources are planned without asking
    whether their topic exists, connections are not validated (neither at CREATE nor by
    VALIDATE CONNECTION), and a materialized view's ingestion starts with the first
    statement that reads data rather than at CREATE (`sluice plan`, tests of planning).
    `spark_conf` (Spark settings, after those of the `SLUICE_SPARK_CONF` file) and
    `spark_ui` (run Spark's web UI) shape the process's Spark session if it starts after
    this session was made; one Spark session serves every session of a process.
    `data_uri` (default `$SLUICE_DATA_URI`) puts the data — streams, sinks, tables — under
    a Hadoop filesystem URI instead of the data directory (see `storage`).

    Front ends (`cli/`) talk to a session only: it also says which plans need Spark, what
    the catalog holds, and what `sluice plan` shows of a statement."""

    @user_errors
    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        check_kafka: bool = True,
        spark_conf: Sequence[tuple[str, str]] = (),
        spark_ui: bool = False,
        data_uri: str | None = None,
    ) -> None:
        self.check_kafka = check_kafka
        self._temporary: tempfile.TemporaryDirectory[str] | None = None
        # Spark's log lives under a data directory that is kept; with a temporary one, in
        # a directory of its own removed at exit (Spark outlives a session in its process).
        log_dir = None if data_dir is None else Path(data_dir) / "log"
        configure(SparkSettings(tuple(spark_conf), spark_ui, log_dir))
        if data_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="sluice-")
            data_dir = self._temporary.name
        self.data_dir = Path(data_dir)
        self._lock = DataDirectoryLock(self.data_dir)
        try:
            self.secrets = SecretStore(self.data_dir)
            self.catalog = DurableCatalog(self.data_dir, self.secrets)
            # A data URI's filesystem is in Spark's JVM: the process's Spark session, once needed.
            self.data = data_location(self.data_dir, data_uri or default_data_uri(), self.start_spark)
            # What a user must hear of the opening (printed as warnings by the front ends).
            self.notices: list[str] = set_aside(self.data_dir, self.data, self.catalog)
        except BaseException:
            self._lock.release()
            raise
        # Every long-running job of the data directory, and where its data lives.
        self.controller = Controller(self.data)
        self.tables = self.controller.tables
        if check_kafka:  # the data directory's sinks run while its session lives
            for item in self.catalog.current:
                if item.kind == kinds.SINK:
                    self._start_sink(item)

    def _start_sink(self, sink) -> None:
        from sluice.render.executor import start_sink  # Spark only when data is needed

        current = self.catalog.current
        start_sink(self.controller, current, sink, sink_query(sink, current))

    @user_errors
    def drain_sinks(self, timeout: float) -> list[tuple[str, str, str | None]]:
        """Wait (up to `timeout` seconds) until every running sink has delivered what its
        relation holds now, or is stalled on its error (a failed one retries meanwhile);
        (name, status, error) of each sink that is not `running` then."""
        statuses = [
            (self.catalog.current.by_id(i).name, self.controller.sink_status(i))
            for i in self.controller.drain_sinks(timeout)
        ]
        return [(name, status[0], status[3]) for name, status in statuses if status[0] != "running"]

    @user_errors
    def start_spark(self) -> Any:
        """The process's Spark session, started with this session's settings if needed."""
        from sluice.spark.session import spark  # importing pyspark takes seconds

        return spark()

    def join_job_group(self, group: str, description: str) -> None:
        """Put the Spark jobs the calling thread starts from now on into job group `group`,
        which `cancel_job_group` cancels (a front end's Ctrl-C); nothing before Spark runs."""
        if spark_running():
            from sluice.spark.session import join_job_group

            join_job_group(group, description)

    def cancel_job_group(self, group: str) -> None:
        """Cancel the running Spark jobs of job group `group` (see `join_job_group`)."""
        if spark_running():
            from sluice.spark.session import cancel_job_group

            cancel_job_group(group)

    def spark_log(self) -> Path:
        """Where Spark's log is (or will be, before Spark starts)."""
        return current_log()

    def spark_ui(self) -> str | None:
        """The address of Spark's web UI, when Spark runs with it (`spark_ui=True`)."""
        if not spark_running():
            return None
        from sluice.spark.session import ui_url

        return ui_url()

    def progress(self, job_group: str | None = None) -> Progress:
        """A snapshot of the work under way (of Spark job group `job_group`, when given);
        callable from any thread while another runs a statement."""
        if not spark_running():
            return Progress(spark_starting=spark_starting())
        from sluice.spark.session import task_progress

        return Progress(self.controller.progress(), task_progress(job_group))

    def close(self) -> None:
        self.controller.close(discard=self._temporary is not None)
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

    @staticmethod
    def needs_spark(planned: Plan) -> bool:
        """Whether carrying out `planned` reads or writes data (on Spark) rather than
        changing or reading the catalog (or counters committed to disk) alone; a
        materialized view starts ingesting when created."""
        if isinstance(planned, CreatePlan):
            return any(item.kind == kinds.MATERIALIZED_VIEW for item in planned.items)
        return not isinstance(
            planned,
            (DropPlan, NoticePlan, RowsPlan, SecretPlan, SinkStatusPlan, StatisticsPlan, ValidatePlan, PysparkPlan),
        )

    @staticmethod
    def is_subscribe(planned: Plan) -> bool:
        """Whether `planned` is a SUBSCRIBE, whose changes `subscribe` streams."""
        return isinstance(planned, SubscribePlan)

    def names(self) -> list[str]:
        """The name of every catalog item."""
        return [item.name for item in self.catalog.current]

    def relations(self) -> list[tuple[str, str]]:
        """(name, kind) of every relation in the catalog, by name."""
        return sorted((i.name, i.kind) for i in self.catalog.current if i.kind in kinds.RELATIONS)

    def kafka_brokers(self, name: str) -> tuple[str, ...]:
        """The brokers of the Kafka connection `name`; none if `name` is not one."""
        item = self.catalog.current.get(name)
        if item is None or item.kind != kinds.CONNECTION or item.connection_desc.connection_type != kinds.KAFKA:
            return ()
        return tuple(item.connection_desc.brokers)

    @user_errors
    def plan_text(self, statement: ast.Statement) -> str:
        """What `sluice plan` shows of a statement: its plan, and what applying it (to the
        catalog alone: a query or a write is planned, never run) created or returned."""
        planned = self.plan(statement)
        lines = [f"-- {statement.redacted().to_sql()}"]
        catalog = self.catalog.current
        if isinstance(planned, (QueryPlan, SubscribePlan)):
            writer = ExplainWriter(catalog)
            writer.query(planned.query if isinstance(planned, SubscribePlan) else planned)
            return "\n".join(lines + writer.lines)
        if isinstance(planned, WritePlan):
            table = catalog.by_id(planned.table_id).name
            return "\n".join(lines + [f"{planned.status} into table {table}"])
        if isinstance(planned, PhysicalPlan):
            raise FeatureNotSupported(
                "EXPLAIN PHYSICAL PLAN needs Spark, which sluice plan does not start",
                span=statement.span,
                hint="run it with sluice run or in the REPL; EXPLAIN shows the optimized plan without Spark",
            )
        result = self.apply(planned, statement)
        lines.append(result.status)
        if result.notice:
            lines.append(f"NOTICE:  {result.notice}")
        if isinstance(planned, CreatePlan):
            writer = ExplainWriter(self.catalog.current)
            for item in planned.items:
                writer.relation(item, None, 1)
            lines += writer.lines
        elif isinstance(planned, (RowsPlan, PysparkPlan)):
            lines.append("  " + " | ".join(result.columns))
            lines += ["  " + " | ".join(value_text(v) for v in row) for row in result.rows]
        return "\n".join(lines)

    @user_errors
    def apply(self, planned: Plan, statement: ast.Statement) -> Result:
        """Carry out a plan made by `plan` from the current catalog: by the method of its
        type (`_APPLY`)."""
        method = _APPLY.get(type(planned))
        if method is None:
            raise FeatureNotSupported(
                f"executing {planned.status} is not implemented yet",
                span=statement.span,
                detail="the statement was planned successfully",
            )
        return method(self, planned, statement)

    def _create(self, planned: CreatePlan, statement: ast.Statement) -> Result:
        self.catalog.commit(self.catalog.current.with_items(planned.items))
        views = [i.id for i in planned.items if i.kind == kinds.MATERIALIZED_VIEW]
        if views and self.check_kafka:
            # A materialized view runs from its creation: its sources ingest continuously.
            updated = self.catalog.current
            self.controller.ingest(updated, updated.upstream_sources(views))
        for sink in (i for i in planned.items if i.kind == kinds.SINK and self.check_kafka):
            self._start_sink(sink)  # a sink runs from its creation, on a thread of its own
        return Result(planned.status)

    def _validate(self, planned: ValidatePlan, statement: ast.Statement) -> Result:
        if self.check_kafka:
            validate(planned.connection, self.catalog.current)
        return self.apply(planned.then, statement) if planned.then else Result(planned.status)

    def _secret(self, planned: SecretPlan, statement: ast.Statement) -> Result:
        current = self.catalog.current
        if planned.item is not None:  # its id is given out before its file names it
            self.catalog.reserve(current.with_items([planned.item]).next_id)
        self.secrets.write(planned.secret_id, planned.value)
        if planned.item is not None:
            try:
                self.catalog.commit(current.with_items([planned.item]))
            except BaseException:
                self.secrets.remove([planned.secret_id])
                raise
        return Result(planned.status)

    def _drop(self, planned: DropPlan, statement: ast.Statement) -> Result:
        current = self.catalog.current
        self.catalog.commit(current.without(planned.ids))
        dropped = [current.by_id(i) for i in planned.ids]
        self.secrets.remove(item.id for item in dropped if item.kind == kinds.SECRET)
        self.controller.drop(dropped)
        return Result(planned.status)

    def _notice(self, planned: NoticePlan, statement: ast.Statement) -> Result:
        return Result(planned.status, notice=planned.notice)

    def _rows(self, planned: RowsPlan, statement: ast.Statement) -> Result:
        return Result(planned.status, planned.columns, list(planned.rows))

    def _sink_statuses(self, planned: SinkStatusPlan, statement: ast.Statement) -> Result:
        statuses = [self.controller.sink_status(i) for i in planned.sink_ids]
        rows = [row + status for row, status in zip(planned.rows, statuses, strict=True)]
        return Result(planned.status, planned.columns, rows)

    def _select(self, planned: QueryPlan, statement: ast.Statement) -> Result:
        """A snapshot: every source read up to the offsets current when the query starts."""
        from sluice.render.executor import select  # Spark only when data is needed

        columns, rows = select(planned, self.catalog.current, self.controller)
        return Result("SELECT", columns, rows)

    def _pyspark(self, planned: PysparkPlan, statement: ast.Statement) -> Result:
        from sluice.render.explain import pyspark_program  # pyspark's modules; no Spark

        lines = pyspark_program(planned, self.tables, self.controller.ingested_sources())
        return Result(planned.status, ("plan",), [(line,) for line in lines])

    def _physical(self, planned: PhysicalPlan, statement: ast.Statement) -> Result:
        from sluice.render.executor import explain_physical  # Spark only when needed

        lines = explain_physical(planned.query, self.catalog.current, self.controller)
        return Result(planned.status, ("Physical Plan",), [(line,) for line in lines])

    def _statistics(self, planned: StatisticsPlan, statement: ast.Statement) -> Result:
        current = self.catalog.current
        rows = [self.controller.statistics(current.by_id(i)) for i in planned.source_ids]
        return Result(planned.status, planned.columns, rows)

    def _subscribe(self, planned: SubscribePlan, statement: ast.Statement) -> Result:
        # As a statement, SUBSCRIBE shows the current contents; `subscribe` streams on.
        changes = self._subscription(planned)
        return Result(planned.status, changes.columns, changes.snapshot())

    def _write(self, planned: WritePlan, statement: ast.Statement) -> Result:
        from sluice.render.executor import run_write  # Spark only when data is needed

        return Result(run_write(planned, self.catalog.current, self.tables, {}))

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

    @user_errors
    def subscribe_plan(self, planned: SubscribePlan):
        """`subscribe` of a SUBSCRIBE already planned (`plan`)."""
        return self._subscription(planned)

    @user_errors
    def describe(self, name: str) -> list[str]:
        """What `sluice plan` tells of the relation `name` besides its columns: for a source
        its topic, formats, envelope, error policy, dead-letter table and timeline."""
        item = resolve(self.catalog.current, _object_name(name))
        writer = ExplainWriter(self.catalog.current)
        writer.relation(item, None, 0)
        # The first line is the kind and name, and the caller shows the columns as a table.
        return [line[2:] for line in writer.lines[1:] if not line.lstrip().startswith("columns:")]

    def relation_columns(self) -> dict[str, tuple[str, ...]]:
        """Each relation's column names, by relation name (for completion)."""
        return {
            item.name: tuple(c.name for c in item.columns)
            for item in self.catalog.current
            if item.kind in kinds.RELATIONS
        }

    @user_errors
    def ingested(self, name: str) -> bool | None:
        """Whether the source `name` is, or was, ingested continuously (only then does it
        have counters, and reading them starts nothing); None for what is not a source."""
        item = resolve(self.catalog.current, _object_name(name))
        if item.kind != kinds.SOURCE:
            return None
        return self.controller.ever_ingested(item.id)

    def _subscription(self, planned: SubscribePlan):
        from sluice.render.executor import (
            subscription,  # Spark only when data is needed
        )

        return subscription(planned.query, self.catalog.current, self.controller)

    def _facts(self, statement: ast.Statement) -> Facts:
        return facts(statement, self.catalog.current, self.check_kafka)


# How `Session.apply` carries out each type of plan (each method takes the plan its key names).
_APPLY: dict[type, Callable[[Session, Any, ast.Statement], Result]] = {
    CreatePlan: Session._create,
    ValidatePlan: Session._validate,
    SecretPlan: Session._secret,
    DropPlan: Session._drop,
    NoticePlan: Session._notice,
    RowsPlan: Session._rows,
    SinkStatusPlan: Session._sink_statuses,
    QueryPlan: Session._select,
    PysparkPlan: Session._pyspark,
    PhysicalPlan: Session._physical,
    StatisticsPlan: Session._statistics,
    SubscribePlan: Session._subscribe,
    WritePlan: Session._write,
}


def _object_name(text: str) -> ast.ObjectName:
    """`text` read as the name of a catalog item (`x`, `public.x`, `"Mixed Case"`)."""
    statement = parse_one(f"SHOW COLUMNS FROM {text}")
    if not isinstance(statement, ast.ShowColumns):
        raise InternalError.bug(f"SHOW COLUMNS parsed as {type(statement).__name__}")
    return statement.name
