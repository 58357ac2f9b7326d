"""A planned query over catalog relations → one Spark DataFrame, checked against errs.

Each relation the query reads becomes a temporary view: a source's oks (or its errs for
`ONLY ERRORS`), a dead-letter table's rows, a view's own query (planned with the query that
reads it) rendered. The query's own fallible expressions add errs of their own
(`sluice.lower`). If any collection read without `IGNORE ERRORS` has errors, the query fails
with the first of them (deterministically chosen: by source, then by partition and offset
within one), whatever its WHERE says.

Errors are the rare path, so a query without any is run once: what guards it is checked
in the same pass where that is sound (a `Guard` says how), and only a guard that may have
errors is read again to name its first.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.errors import FeatureNotSupported, InternalError, SourceFailed, SqlError, collection_error
from sluice.lower import MESSAGE, Fusion, lower
from sluice.plan.plans import QueryPlan, Read
from sluice.render.types import stored_table_frame, wall_clock_frame
from sluice.spark.guards import failed_run, raising
from sluice.spark.pyspark_code import F, fail_if
from sluice.storage.source import Collection, SourceRead, render_source
from sluice.storage.tables import TableStore


@dataclass(frozen=True)
class Observed:
    """An observation (`name`) of a source's messages in the query's own pass: having
    counted all `messages` the read covers, it knows whether any is an error."""

    name: str
    messages: int


@dataclass
class Guard:
    """Errors a query must fail with, and how a run learns whether there are any: from
    a hidden boolean column of its rows (`flag`), from an observation of a source it
    reads (`observed`), or else by reading `errs` in the same job, which fails if any."""

    errs: DataFrame  # `message` (and `kind`, `partition`, `offset` for a source's)
    flag: str | None = None
    observed: Observed | None = None


class Stored(Protocol):
    """A continuously ingested source's committed batches as a query reads them: its
    `Store`, or, printed by EXPLAIN PYSPARK, the program's reads of its files."""

    def collection(self, spark: SparkSession, item: Item) -> Collection: ...

    def release(self) -> None: ...


@dataclass
class QueryRenderer:
    spark: SparkSession
    catalog: Catalog
    reads: Callable[[str], SourceRead]  # item id of a source → what the snapshot reads
    tables: TableStore
    # Continuously ingested sources: read from their committed batches, not from Kafka.
    stored: Mapping[str, Stored] = field(default_factory=dict)
    snapshot_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    collections: dict[str, Collection] = field(default_factory=dict)
    runs: list[list[Guard]] = field(default_factory=list)  # each run's guards
    read_counts: dict[str, int] = field(default_factory=dict)  # source id → times read
    persisted: list[DataFrame] = field(default_factory=list)  # what `close` unpersists
    names: Iterator[str] = field(default_factory=lambda: (f"__sluice_{i}" for i in itertools.count()))

    def source(self, item_id: str) -> Collection:
        if item_id not in self.collections:
            item = self.catalog.by_id(item_id)
            if item_id in self.stored:
                collection = self.stored[item_id].collection(self.spark, item)
            else:
                collection = render_source(self.spark, item, self.catalog, self.reads(item_id))
            self.collections[item_id] = collection
        return self.collections[item_id]

    def relation(self, read: Read) -> tuple[DataFrame, list[Guard]]:
        """The rows a reference reads and the guards of what they derive from."""
        item_id, errors = read.item_id, read.errors
        item = self.catalog.by_id(item_id)
        if item.kind == kinds.SOURCE:
            collection = self.source(item_id)
            self.check_tolerance(item_id, collection)
            self.read_counts[item_id] = self.read_counts.get(item_id, 0) + 1
            redirected = item.source_desc.dead_letter_table is not None
            if errors == "ONLY":
                # With a dead-letter table the source's errs stream receives nothing.
                errs = collection.errs.select("message", "code")
                return (errs.limit(0) if redirected else errs), []
            guarded = errors != "IGNORE" and not redirected and not collection.errorless
            if not guarded:
                return collection.oks, []
            observable = collection.observable
            if observable is None:
                return collection.oks, [Guard(collection.errs)]
            name = next(self.names)
            observed = collection.base.observe(
                name, F.count(F.lit(1)).alias("messages"), F.max(F.col("__error").isNotNull()).alias("failed")
            )
            return observable.rows_of(observed), [Guard(collection.errs, observed=Observed(name, observable.offsets))]
        if item.kind == kinds.DEAD_LETTER_TABLE:
            collection = self.source(item.dead_letter_desc.source)
            if collection.dead_letters is not None:
                return _dead_letter_rows(collection.dead_letters, F.col("mz_timestamp")), []
            return _dead_letter_rows(collection.log, F.lit(self.snapshot_ms)), []
        if item.kind == kinds.TABLE:
            return stored_table_frame(self.spark, item.columns, self.tables.text(item)), []
        if item.kind in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
            if read.query is None:  # the planner plans a view's query with the query reading it
                raise InternalError.bug(f'a read of the view "{item.name}" without its query')
            return self.query(read.query)
        raise FeatureNotSupported(f"reading a {item.kind} is not implemented yet")

    def check_tolerance(self, item_id: str, collection: Collection) -> None:
        """A source with ERROR TOLERANCE n has failed once it has seen more than n errors,
        wherever they went (errs, dead-letter table), and every read of it fails."""
        item = self.catalog.by_id(item_id)
        tolerance = item.source_desc.error_tolerance
        if tolerance is None:
            return
        self._persist(collection.base)
        seen = collection.log.count()
        reason = f"{seen} errors seen, more than its ERROR TOLERANCE of {tolerance}"
        fail_if(seen > tolerance, SourceFailed(item.name, reason, recovers=False))

    def query(self, plan: QueryPlan) -> tuple[DataFrame, list[Guard]]:
        """The query's frame: its planned columns, then hidden flag columns of guards."""
        if plan.expression is None:  # SUBSCRIBE to a relation by name
            (read,) = plan.reads
            return self.relation(read)
        guards: list[Guard] = []
        views: dict[str, str] = {}
        carried: dict[str, list[str]] = {}
        for read in plan.reads:
            frame, read_guards = self.relation(read)
            guards += read_guards
            name = relation_view(read)
            item = self.catalog.by_id(read.item_id)
            if item.kind == kinds.TABLE:  # jsonb is stored as text, queried as a VARIANT
                frame = frame.select(*(_queried(c) for c in item.columns))
            frame.createOrReplaceTempView(name)
            carried[name] = [g.flag for g in read_guards if g.flag is not None]
            views[f"only errors({item.name})" if read.errors == "ONLY" else item.name] = name
        lowered = lower(plan.expression, views, Fusion(self.names, carried))
        for guard in guards:  # a flag the query's rows do not carry on: its errs are read
            if guard.flag not in lowered.carried:
                guard.flag = None
        guards += [Guard(self.spark.sql(errors), flag) for errors, flag in zip(lowered.errors, lowered.flags)]
        frame = self.spark.sql(lowered.sql)
        hidden = frame.columns[len(plan.columns) :]
        # Named as planned (`count`, not sqlglot's `_col_1`): what queries over a view say.
        return frame.toDF(*(c.name for c in plan.columns), *hidden), guards

    def collect(
        self, plan: QueryPlan, shape: Callable[[DataFrame], Sequence[SparkColumn]] | None = None
    ) -> list[tuple]:
        """The query's rows (projected by `shape`, given its frame), read in full. If any
        of what guards the query has an error, this raises the first (`collection_error`):
        the job fails at once for a guard read in it (and `error_of` names the error);
        other guards are looked at once their rows are in."""
        frame, guards, width = self.prepare(plan, shape)
        rows = wall_clock_frame(frame).collect()
        columns = frame.columns
        flagged = {g.flag for g in guards if g.flag is not None and any(r[columns.index(g.flag)] for r in rows)}
        error = self.unread_error(frame, guards, flagged)
        if error is not None:
            raise error
        return [tuple(row[:width]) for row in rows]

    def prepare(
        self, plan: QueryPlan, shape: Callable[[DataFrame], Sequence[SparkColumn]] | None = None
    ) -> tuple[DataFrame, list[Guard], int]:
        """What `collect` collects: the frame whose first `width` columns are the rows
        (the rest are guards' flags), failing when a guard read in its job has an error,
        and the guards."""
        frame, guards = self.query(plan)
        hidden = frame.columns[len(plan.columns) :]
        if shape is not None:
            frame = frame.select(*shape(frame.drop(*hidden)), *hidden)
        width = len(frame.columns) - len(hidden)
        read = [g for g in guards if g.flag is None and g.observed is None]
        if read or any(n > 1 for n in self.read_counts.values()):
            for item_id in self.read_counts:  # read the topic once, however many reads
                if item_id not in self.stored:  # committed files are cheaper to read again than to cache
                    self._persist(self.collections[item_id].base)
        return self._failing_on(frame, read, guards), guards, width

    def _failing_on(self, frame: DataFrame, read: list[Guard], guards: list[Guard]) -> DataFrame:
        """`frame` with rows of `read` guards' errs that fail the job when there are any."""
        if not read:
            return frame
        run = len(self.runs)
        self.runs.append(guards)
        union = _union(guard.errs.select(MESSAGE) for guard in read)
        failing = union.where(raising(F.col(MESSAGE), run).isNull())
        return frame.unionAll(failing.select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in frame.schema)))

    def unread_error(self, frame: DataFrame, guards: list[Guard], flagged: set[str]) -> SqlError | None:
        """The first error of the guards checked in the run's own pass (a guard read in
        the job had none, or the job would have failed), `flagged` being the flag columns
        set in some row of `frame` once it ran."""
        for guard in guards:
            if guard.flag is not None:
                suspect = guard.flag in flagged
            elif guard.observed is not None:
                counted = _observed(frame, guard.observed.name)
                suspect = counted != (guard.observed.messages, False)
            else:
                continue
            if suspect and (error := _first_error([guard])) is not None:
                return error
        return None

    def error_of(self, failure: Exception) -> SqlError | None:
        """The error a `collect` fails with when `failure` is its guards' doing:
        the first guard's first error (by kind, partition and offset within a source's
        errs, then text), found by a second job — errors are the rare path."""
        run = failed_run(failure)
        return None if run is None else _first_error(self.runs[run])

    def _persist(self, frame: DataFrame) -> None:
        frame.persist()
        self.persisted.append(frame)

    def close(self) -> None:
        # Only what was persisted: a stored collection builds a frame when first asked for,
        # and one built here would list files outside the query's failure handling.
        for frame in self.persisted:
            frame.unpersist()
        for store in self.stored.values():
            store.release()


def relation_view(read: Read) -> str:
    """The temporary view of a relation the query reads."""
    return f"sluice_{read.item_id}_{(read.errors or 'rows').lower()}"


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


def _observed(frame: DataFrame, name: str) -> tuple[int, bool] | None:
    """(messages counted, whether any is an error) by observation `name` in the job that
    read `frame`, or None if it never ran. Read from that job's execution: PySpark's
    `Observation.get` waits forever for an observation Spark planned away."""
    found = frame._jdf.queryExecution().observedMetrics().get(name)
    if found.isEmpty():
        return None
    metrics = found.get()
    return metrics.getLong(0), not metrics.isNullAt(1) and metrics.getBoolean(1)


def _first_error(guards: list[Guard]) -> SqlError | None:
    """The first error of `guards` (a source's errs rows carry their `code`; an evaluation
    error's code is found from its words)."""
    first = first_errors(guards).first()
    return None if first is None else collection_error(first.message, first.code)


def first_errors(guards: list[Guard]) -> DataFrame:
    """The errors of `guards` as (message, code), the first first."""
    keys = ("kind", "partition", "offset")
    rows = (
        guard.errs.select(
            F.lit(index).alias("guard"),
            *(F.col(k) if k in guard.errs.columns else F.lit(None).alias(k) for k in keys),
            F.col(MESSAGE).alias("message"),
            F.col("code") if "code" in guard.errs.columns else F.lit(None).cast("string").alias("code"),
        )
        for index, guard in enumerate(guards)
    )
    return _union(rows).orderBy("guard", *keys, "message").select("message", "code")


def _union(frames: Iterable[DataFrame]) -> DataFrame:
    """The frames' rows together, by column name. There is one at least: the guards of a
    run that reads some, of a query that has some."""
    union: DataFrame | None = None
    for frame in frames:
        union = frame if union is None else union.unionByName(frame)
    if union is None:
        raise InternalError.bug("a union of the errors of no guards")
    return union
