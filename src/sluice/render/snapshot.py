"""Snapshot SELECT (each source read up to its offsets when the query starts) and table
writes, run on Spark."""

from __future__ import annotations

import re
import time
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql.types import VariantVal

from sluice.catalog.store import Catalog
from sluice.errors import ExternalSystemError, FeatureNotSupported, SqlError
from sluice.kafka.client import KafkaReadError, offsets_for_timestamp, watermarks
from sluice.plan.plans import QueryPlan, WritePlan
from sluice.render.evaluation import spark_error
from sluice.render.query import QueryRenderer, SourceDataError
from sluice.render.source import SourceRead
from sluice.render.spark import spark
from sluice.render.writes import execute_write
from sluice.tables import TableStore


class QueryFailed(SqlError):
    """Spark refused or failed a query sluice let through; a bug or a gap to report."""

    code = "XX000"


def snapshot_read(catalog: Catalog, item_id: str) -> SourceRead:
    """The offset ranges a snapshot of the source reads, and what retention already lost."""
    desc = catalog.by_id(item_id).details
    connection = catalog.by_id(desc.connection).details
    brokers = ",".join(connection.brokers)
    try:
        marks = watermarks(brokers, desc.topic, {})
        starts = {p: 0 for p in marks}
        if desc.start_timestamp is not None:
            at = desc.start_timestamp
            if at < 0:  # relative to now, as Materialize reads a negative START TIMESTAMP
                at += int(time.time() * 1000)
            starts = offsets_for_timestamp(brokers, desc.topic, {}, at, marks)
        starts.update(enumerate(desc.start_offsets))
    except KafkaReadError as e:
        raise ExternalSystemError(f"Source error: {catalog.by_id(item_id).name}: {e}") from None
    ranges, lost = [], []
    for partition, (low, high) in marks.items():
        start = starts.get(partition, 0)
        if start < low:
            lost.append((partition, start, low))
            start = low
        ranges.append((partition, start, max(start, high)))
    return SourceRead(tuple(ranges), tuple(lost))


def renderer(catalog: Catalog, tables: TableStore) -> QueryRenderer:
    return QueryRenderer(spark(), catalog, lambda item_id: snapshot_read(catalog, item_id), tables=tables)


def run_snapshot(
    plan: QueryPlan, catalog: Catalog, tables: TableStore
) -> tuple[tuple[str, ...], list[tuple]]:
    queries = renderer(catalog, tables)
    try:
        frame = queries.run(plan)
        rows = [tuple(_value(v) for v in row) for row in frame.collect()]
    except (PySparkException, Py4JJavaError) as e:
        raise _failure(e, "query failed on Spark", queries) from None
    finally:
        queries.close()
    return tuple(c.name for c in plan.columns), rows


def run_write(plan: WritePlan, catalog: Catalog, tables: TableStore) -> str:
    queries = renderer(catalog, tables)
    try:
        return execute_write(plan, catalog, tables, queries)
    except (PySparkException, Py4JJavaError) as e:
        raise _failure(e, f"{plan.status} failed on Spark", queries) from None
    finally:
        queries.close()


def _failure(error: Exception, what: str, queries: QueryRenderer) -> SqlError:
    """A Spark failure as the error of a collection the query read, as the evaluation
    error PostgreSQL would have reported, as a construct Spark cannot run (refused before
    running: 0A000), or as a failed query."""
    message = queries.error_of(error) or spark_error(error)
    if message is not None:
        return SourceDataError(message)
    if isinstance(error, Py4JJavaError):
        return QueryFailed(f"{what}: {error.java_exception.getMessage()}")
    text = error.getMessage() or str(error)
    if isinstance(error, AnalysisException):
        return FeatureNotSupported(_unsupported(error), detail=f"Spark: {text}")
    return QueryFailed(f"{what}: {text}")


def _unsupported(error: AnalysisException) -> str:
    """What Spark refused, named: a function it lacks, or its own words."""
    parameters = error.getMessageParameters() or {}
    if error.getCondition() == "UNRESOLVED_ROUTINE":
        return f"function {parameters.get('routineName', '').strip('`').lower()} is not supported"
    first = (error.getMessage() or str(error)).split("\n")[0]
    first = re.sub(r"^\[[A-Z_.]+\] | SQLSTATE: \w+$", "", first).rstrip(". ")
    return f"Spark cannot run this query: {first[:1].lower()}{first[1:]}"


def _value(value: Any) -> Any:
    if isinstance(value, VariantVal):
        return value.toJson()
    return value
