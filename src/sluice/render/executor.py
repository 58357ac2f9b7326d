"""The executor: runs a plan on Spark — snapshot SELECT (each source read up to its offsets
when the query starts, continuously ingested ones from their stores once the storage
controller has them caught up), EXPLAIN PHYSICAL PLAN, table writes, subscriptions, and
the evaluation of a sink's relation, which the controller runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql.types import VariantVal

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import (
    ExternalSystemUnavailable,
    FeatureNotSupported,
    SourceFailed,
    SparkQueryFailed,
    SqlError,
    collection_error,
)
from sluice.kafka.progress import Progress
from sluice.kafka.retry import RetryPolicy, SourceUnavailable
from sluice.plan.plans import QueryPlan, WritePlan
from sluice.render.query import QueryRenderer
from sluice.render.subscribe import Subscription
from sluice.render.writes import execute_write
from sluice.spark.conditions import evaluation_error, refusal, unresolved_function
from sluice.spark.failures import WORKER_LATE, retried, unavailable, worker_late
from sluice.spark.kafka_source import DEFAULT_RETRY
from sluice.spark.session import jvm, spark
from sluice.storage.controller import Controller
from sluice.storage.sink.changes import Changes
from sluice.storage.sink.envelope import SinkEnvelope
from sluice.storage.sink.state import SinkState
from sluice.storage.source import retry_policy, snapshot_read
from sluice.storage.store import Store
from sluice.storage.tables import TableStore


def subscription(plan: QueryPlan, catalog: Catalog, controller: Controller) -> Subscription:
    """A SUBSCRIBE: every source the query reads is ingested continuously, so each of its
    micro-batches is a point where the query's result may change."""
    tables = controller.tables
    item_ids = [r.item_id for r in plan.reads]
    stores = controller.caught_up(catalog, item_ids, frozenset(catalog.upstream_sources(item_ids)))
    table_paths = [tables.path(catalog.by_id(t)) for t in catalog.upstream_sources(item_ids, kinds.TABLE)]

    def version():
        return (
            tuple(store.committed()[-1:] for store in stores.values()),
            tuple(p.version() for p in table_paths),
        )

    def evaluate():
        commits = [store.last_commit() for store in stores.values()]
        stamps = [c["ingested_ms"] for c in commits if c is not None]
        timestamp = max(stamps, default=int(time.time() * 1000))
        return timestamp, run_snapshot(plan, catalog, tables, stores)[1]

    return Subscription(tuple(c.name for c in plan.columns), evaluate, version)


def renderer(catalog: Catalog, tables: TableStore, stores: dict[str, Store]) -> QueryRenderer:
    return QueryRenderer(
        spark(), catalog, lambda item_id: snapshot_read(catalog, item_id), tables=tables, stored=stores
    )


def start_sink(controller: Controller, catalog: Catalog, sink: Item, plan: QueryPlan) -> None:
    """Have the controller run the sink `sink` over its relation's query `plan`: every
    source the relation reads is ingested continuously, so each of its micro-batches (and
    each write of a table it reads) is a point where the sink's relation may change."""
    tables = controller.tables
    item_ids = [r.item_id for r in plan.reads]
    sources = catalog.upstream_sources(item_ids)
    table_paths = [tables.path(catalog.by_id(t)) for t in catalog.upstream_sources(item_ids, kinds.TABLE)]

    def version():
        return (
            tuple(controller.store(s).committed()[-1:] for s in sources),
            tuple(p.version() for p in table_paths),
        )

    def evaluate(envelope: SinkEnvelope, state: SinkState, progress: Progress) -> Changes:
        stores = controller.caught_up(catalog, item_ids, frozenset(sources))
        stored = envelope.stored_changes(stores, state, progress)
        if stored is not None:
            return stored
        queries = renderer(catalog, tables, stores)
        with _reported(plan, catalog, queries):
            frame, guards, width = queries.prepare(plan, lambda frame: list(envelope.shape(frame)))
            flags = frame.columns[width:]
            shaped = frame.toDF("identity", "payload", *flags)
            changes = state.diff(shaped, progress.version, flags, envelope.unique)
            error = queries.unread_error(frame, guards, set(changes.flagged))
            if error is not None:
                raise error
            return changes

    controller.start_sink(sink, catalog, evaluate, version)


def select(plan: QueryPlan, catalog: Catalog, controller: Controller) -> tuple[tuple[str, ...], list[tuple]]:
    """A SELECT: its columns and rows, continuously ingested sources caught up first."""
    stores = controller.caught_up(catalog, [r.item_id for r in plan.reads])
    return run_snapshot(plan, catalog, controller.tables, stores)


def explain_physical(plan: QueryPlan, catalog: Catalog, controller: Controller) -> list[str]:
    """EXPLAIN PHYSICAL PLAN of a SELECT (`physical_plan`), its sources caught up first."""
    stores = controller.caught_up(catalog, [r.item_id for r in plan.reads])
    return physical_plan(plan, catalog, controller.tables, stores)


def run_snapshot(
    plan: QueryPlan,
    catalog: Catalog,
    tables: TableStore,
    stores: dict[str, Store],
    shape: Callable[[DataFrame], list[SparkColumn]] | None = None,
) -> tuple[tuple[str, ...], list[tuple]]:
    """The query's rows (projected by `shape`, given its frame)."""
    queries = renderer(catalog, tables, stores)
    with _reported(plan, catalog, queries):
        collected = retried(lambda: queries.collect(plan, shape), _statement_retry(plan, catalog))
        rows = [tuple(_value(v) for v in row) for row in collected]
    return tuple(c.name for c in plan.columns), rows


def physical_plan(plan: QueryPlan, catalog: Catalog, tables: TableStore, stores: dict[str, Store]) -> list[str]:
    """EXPLAIN PHYSICAL PLAN: Spark's physical plan of the DataFrame a SELECT of `plan`
    collects (its guards included), as Spark's `explain()` prints it; nothing is collected."""
    queries = renderer(catalog, tables, stores)
    with _reported(plan, catalog, queries):
        frame, _, _ = queries.prepare(plan)
        text = jvm(frame.sparkSession).PythonSQLUtils.explainString(frame._jdf.queryExecution(), "simple")
    return [line for line in text.splitlines() if line.strip()]


def _statement_retry(plan: QueryPlan, catalog: Catalog) -> RetryPolicy:
    """How long a statement's Spark job waits out Spark failing to start a Python worker
    (`failures.retried`): the longest RETRY TIMEOUT of the sources it reads, naming that
    source in the failure past it (Kafka Connect's default, naming none, if it reads none)."""
    sources = catalog.upstream_sources(r.item_id for r in plan.reads)
    return max((retry_policy(catalog.by_id(s)) for s in sources), key=lambda p: p.timeout, default=DEFAULT_RETRY)


@contextlib.contextmanager
def _reported(plan: QueryPlan, catalog: Catalog, queries: QueryRenderer) -> Iterator[None]:
    """Run the query `queries` renders inside, its failures as SQL errors; close it after."""
    try:
        yield
    except SqlError as e:
        raise _with_hint(e, plan, catalog)
    except (PySparkException, Py4JJavaError) as e:
        raise _with_hint(_failure(e, "query failed on Spark", queries), plan, catalog) from None
    except SourceUnavailable as e:  # `retried` gave up
        raise (SourceFailed(e.source, e.reason) if e.source else ExternalSystemUnavailable(e.reason)) from None
    finally:
        queries.close()


# Errors a source's messages brought, which the source's error handling can keep out.
_MESSAGE_ERRORS = ("Decode error: ", "Envelope error: ")


def _with_hint(error: SqlError, plan: QueryPlan, catalog: Catalog) -> SqlError:
    """A query failed on a bad message of a source: the HINT says how to read around it."""
    if not error.message.startswith(_MESSAGE_ERRORS):
        return error
    suspects = [
        catalog.by_id(s)
        for s in catalog.upstream_sources(r.item_id for r in plan.reads if r.errors is None)
    ]
    suspects = [s for s in suspects if s.source_desc.dead_letter_table is None]
    if suspects and error.hint is None:
        name = suspects[0].name
        error.hint = (
            f"FROM IGNORE ERRORS {name} reads its rows without the errors, FROM ONLY ERRORS "
            f"{name} lists them, and WITH (REDIRECT ERRORS = table) on a source sends them to "
            "a dead-letter table"
        )
    return error


def run_write(plan: WritePlan, catalog: Catalog, tables: TableStore, stores: dict[str, Store]) -> str:
    queries = renderer(catalog, tables, stores)
    try:
        return execute_write(plan, catalog, tables, queries)
    except (PySparkException, Py4JJavaError) as e:
        raise _failure(e, f"{plan.status} failed on Spark", queries) from None
    finally:
        queries.close()


def _failure(error: PySparkException | Py4JJavaError, what: str, queries: QueryRenderer) -> SqlError:
    """A Spark failure as a source that could not be read, as the error of a collection
    the query read, as Spark failing to start a Python worker in time (`failures`), as the
    evaluation error PostgreSQL would have reported, as a construct Spark cannot run
    (refused before running: 0A000), or as a failed query."""
    read = unavailable(error)
    if read is not None:
        return SourceFailed(*read)
    if worker_late(error):
        return ExternalSystemUnavailable(WORKER_LATE)
    collected = queries.error_of(error)
    if collected is not None:
        return collected
    message = evaluation_error(error)
    if message is not None:
        return collection_error(message, None)
    if isinstance(error, Py4JJavaError):
        return SparkQueryFailed(f"{what}: {error.java_exception.getMessage()}")
    text = error.getMessage() or str(error)
    if isinstance(error, AnalysisException):
        # The name is the user's, and Spark's search path of catalogs means nothing to them.
        routine = unresolved_function(error)
        if routine is not None:
            return FeatureNotSupported(f"function {routine} is not supported")
        return FeatureNotSupported(f"Spark cannot run this query: {refusal(error)}", detail=f"Spark: {text}")
    return SparkQueryFailed(f"{what}: {text}")


def _value(value: Any) -> Any:
    if isinstance(value, VariantVal):
        return value.toJson()
    return value
