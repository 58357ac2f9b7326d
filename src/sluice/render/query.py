"""A planned query over catalog relations → one Spark DataFrame, checked against errs.

Each relation the query reads becomes a temporary view: a source's oks (or its errs for
`ONLY ERRORS`), a dead-letter table's rows, a view's own rendered query. The query's own
fallible expressions add errs of their own (`evaluation`). If any collection read without
`IGNORE ERRORS` has errors, the query fails with the first of them (deterministically
chosen: by source, then by partition and offset within one), whatever its WHERE says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from sluice.catalog import items as kinds
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.errors import FeatureNotSupported, SqlError
from sluice.plan.plans import QueryPlan
from sluice.plan.queries import plan_query
from sluice.render import evaluation
from sluice.render.evaluation import MESSAGE
from sluice.render.semantics import spark_sql
from sluice.render.source import Collection, SourceRead, render_source
from sluice.render.store import Store
from sluice.render.types import table_frame
from sluice.syntax.query import ERRORS_MODIFIER, parse_query
from sluice.tables import TableStore


# The text a guard's failure raises in Spark: this prefix, the run's index, the error.
_GUARD = "sluice guard failed: run "


class SourceDataError(SqlError):
    """A query read a collection whose errs is not empty."""

    code = "XX000"


@dataclass
class QueryRenderer:
    spark: SparkSession
    catalog: Catalog
    reads: Callable[[str], SourceRead]  # item id of a source → what the snapshot reads
    tables: TableStore | None = None
    # Continuously ingested sources: read from their committed batches, not from Kafka.
    stored: dict[str, Store] = field(default_factory=dict)
    snapshot_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    collections: dict[str, Collection] = field(default_factory=dict)
    runs: list[list[DataFrame]] = field(default_factory=list)  # each run's guards

    def source(self, item_id: str) -> Collection:
        if item_id not in self.collections:
            item = self.catalog.by_id(item_id)
            if item_id in self.stored:
                collection = self.stored[item_id].collection(self.spark, item.details)
            else:
                collection = render_source(self.spark, item, self.catalog, self.reads(item_id))
            self.collections[item_id] = collection
        return self.collections[item_id]

    def relation(self, item_id: str, errors: str | None) -> tuple[DataFrame, list[DataFrame]]:
        """The rows a reference reads and the errs collections that guard it."""
        item = self.catalog.by_id(item_id)
        if item.kind == kinds.SOURCE:
            collection = self.source(item_id)
            self.check_tolerance(item_id, collection)
            redirected = item.details.dead_letter_table is not None
            if errors == "ONLY":
                # With a dead-letter table the source's errs stream receives nothing.
                errs = collection.errs.select("message", "code")
                return (errs.limit(0) if redirected else errs), []
            guarded = errors != "IGNORE" and not redirected
            if not guarded:
                return collection.oks, []
            # The error check and the query share the decoded rows: read the topic once.
            collection.base.persist()
            return collection.oks, [collection.errs]
        if item.kind == kinds.DEAD_LETTER_TABLE:
            collection = self.source(item.details.source)
            if collection.dead_letters is not None:
                return _dead_letter_rows(collection.dead_letters, F.col("mz_timestamp")), []
            return _dead_letter_rows(collection.log, F.lit(self.snapshot_ms)), []
        if item.kind == kinds.TABLE:
            return table_frame(self.spark, self.tables.read(item), item.columns), []
        if item.kind in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
            body = parse_query(item.details.query, 0, "query")
            return self.query(plan_query(body, self.catalog))
        raise FeatureNotSupported(f"reading a {item.kind} is not implemented yet")

    def check_tolerance(self, item_id: str, collection: Collection) -> None:
        """A source with ERROR TOLERANCE n has failed once it has seen more than n errors,
        wherever they went (errs, dead-letter table), and every read of it fails."""
        item = self.catalog.by_id(item_id)
        tolerance = item.details.error_tolerance
        if tolerance is None:
            return
        collection.base.persist()
        seen = collection.log.count()
        if seen > tolerance:
            raise SourceDataError(
                f'Source error: source "{item.name}" has failed: {seen} errors seen, '
                f"more than its ERROR TOLERANCE of {tolerance}"
            )

    def query(self, plan: QueryPlan) -> tuple[DataFrame, list[DataFrame]]:
        if plan.expression is None:  # SUBSCRIBE to a relation by name
            (read,) = plan.reads
            return self.relation(read.item_id, read.errors)
        guards: list[DataFrame] = []
        expression = plan.expression.copy()
        views: dict[str, str] = {}
        for read in plan.reads:
            frame, read_guards = self.relation(read.item_id, read.errors)
            guards += read_guards
            name = f"sluice_{read.item_id}_{(read.errors or 'rows').lower()}"
            item = self.catalog.by_id(read.item_id)
            if item.kind == kinds.TABLE:  # jsonb is stored as text, queried as a VARIANT
                frame = frame.select(*(_queried(c) for c in item.columns))
            frame.createOrReplaceTempView(name)
            views[f"only errors({item.name})" if read.errors == "ONLY" else item.name] = name
        for table in expression.find_all(exp.Table):
            if table.name in views:
                table.set("this", exp.to_identifier(views[table.name]))
                table.set(ERRORS_MODIFIER, None)
        checked = evaluation.check(expression)
        guards += [self.spark.sql(spark_sql(errors)) for errors in checked.errors]
        # Named as planned (`count`, not sqlglot's `_col_1`): what queries over a view say.
        frame = self.spark.sql(spark_sql(checked.query)).toDF(*(c.name for c in plan.columns))
        return frame, guards

    def run(self, plan: QueryPlan) -> DataFrame:
        """The query's rows; read in full, they fail in the same Spark job if any of what
        guards the query has an error, and `error_of` then names the error."""
        frame, guards = self.query(plan)
        if not guards:
            return frame
        marker = f"{_GUARD}{len(self.runs)}"
        self.runs.append(guards)
        union = None
        for errs in guards:
            union = errs.select(MESSAGE) if union is None else union.unionByName(errs.select(MESSAGE))
        # Raised only for a message: Spark may move a guard's filters past one another
        # (and one reading no column below a join, raising on every row of one side).
        message = F.col(MESSAGE)
        raised = F.when(message.isNotNull(), F.raise_error(F.concat(F.lit(f"{marker}: "), message)))
        failing = union.where(raised.isNull())
        return frame.unionAll(failing.select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in frame.schema)))

    def error_of(self, failure: Exception) -> str | None:
        """The error a query `run` made fails with when `failure` is its guards' doing:
        the first guard's first error (by kind, partition and offset within a source's
        errs, then text), found by a second job — errors are the rare path."""
        condition = getattr(failure, "getCondition", lambda: None)()
        if condition != "USER_RAISED_EXCEPTION":
            return None
        marker = (failure.getMessageParameters() or {}).get("errorMessage", "")
        if not marker.startswith(_GUARD):
            return None
        run = marker.removeprefix(_GUARD).split(":", 1)[0]
        return _first_error(self.runs[int(run)])

    def close(self) -> None:
        for collection in self.collections.values():
            collection.base.unpersist()


def _dead_letter_rows(errs: DataFrame, mz_timestamp) -> DataFrame:
    return errs.select(
        mz_timestamp.alias("mz_timestamp"),
        F.col("message").alias("error"),
        F.col("code").alias("error_code"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
    )


def _queried(column: Column) -> SparkColumn:
    value = F.col("`" + column.name.replace("`", "``") + "`")
    return F.parse_json(value).alias(column.name) if column.type.name == "jsonb" else value


def _first_error(guards: list[DataFrame]) -> str:
    keys = ("kind", "partition", "offset")
    union = None
    for index, errs in enumerate(guards):
        row = errs.select(
            F.lit(index).alias("guard"),
            *(F.col(k) if k in errs.columns else F.lit(None).alias(k) for k in keys),
            F.col(MESSAGE).alias("message"),
        )
        union = row if union is None else union.unionByName(row)
    return union.orderBy("guard", *keys, "message").select("message").first().message
