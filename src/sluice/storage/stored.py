"""A continuously ingested source's committed files read back as a `Collection` — its rows
and errors those no later commit retracted — and an upsert source's standing state (the
key and place of each key's winning message), given a function reading the files of one
kind: the store's, or EXPLAIN PYSPARK's recording of them."""

from __future__ import annotations

import functools
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from sluice.catalog.items import Item
from sluice.spark.pyspark_code import F
from sluice.storage.source import ERRS_COLUMNS, Observable

IDENTITY = ["__p", "__o"]
# The columns of an upsert source's `state` files its standing state is read from.
STATE_SCHEMA = StructType(
    [StructField("__k", BinaryType()), StructField("__p", IntegerType()), StructField("__o", LongType())]
)

Unretracted = Callable[[DataFrame], DataFrame]  # rows → those no commit retracted


def no_standing(spark: SparkSession) -> DataFrame:
    """An upsert state with no key: what a source's first micro-batch is set against."""
    return spark.read.schema(STATE_SCHEMA).parquet()


def stored_standing(frame: Callable[[str], DataFrame], unretracted: Unretracted | None = None) -> DataFrame:
    """An upsert source's state from its committed files, `frame(kind)` reading those of
    one kind: the key and place of every `state` row no commit retracted (`unretracted`
    leaves out the retracted rows; by default, a join with the `retract` rows)."""
    unretracted = unretracted or anti_joined(frame)
    return unretracted(frame("state")).select("__k", *IDENTITY)


def anti_joined(frame: Callable[[str], DataFrame]) -> Unretracted:
    """What leaves out retracted rows by joining them with the `retract` rows."""
    retracted = frame("retract").select(*IDENTITY)
    return lambda rows: rows.join(retracted, IDENTITY, "left_anti")


def without_places(rows: DataFrame, places: dict[int, list[int]]) -> DataFrame:
    """`rows` but those at `places` (partition → offsets): a filter of literals."""
    hit = None
    for partition, offsets in sorted(places.items()):
        at = (F.col("__p") == partition) & F.col("__o").isin(sorted(offsets))
        hit = at if hit is None else hit | at
    return rows if hit is None else rows.where(~F.coalesce(hit, F.lit(False)))


class StoredCollection:
    """The source's `Collection` from its committed files, `frame(kind)` reading those of
    one kind: an upsert source's rows and errors are those no later commit retracted
    (`unretracted`, as for `stored_standing`). Each frame is built when first asked for
    (a query reads the rows and errors, seldom the log or the dead-letter rows: each
    frame a SELECT builds costs it ~20 ms); `errorless` when `present`, the kinds that
    have files, shows no error could stand (no errs files)."""

    observable: Observable | None = None  # files, not a read of Kafka: nothing observed

    def __init__(
        self,
        item: Item,
        frame: Callable[[str], DataFrame],
        unretracted: Unretracted | None = None,
        present: Callable[[str], bool] | None = None,
    ) -> None:
        self._desc = item.source_desc
        self._frame = frame
        self._unretracted = unretracted or (None if self._desc.envelope == "none" else anti_joined(frame))
        self.errorless = present is not None and not present("errs")

    def _kept(self, kind: str) -> DataFrame:
        rows = self._frame(kind)
        return rows if self._unretracted is None else self._unretracted(rows)

    @functools.cached_property
    def oks(self) -> DataFrame:
        return self._kept("oks").select("row.*")

    @functools.cached_property
    def base(self) -> DataFrame:
        return self.oks

    @functools.cached_property
    def errs(self) -> DataFrame:
        return self._kept("errs").select(*_errs_fields())

    @functools.cached_property
    def dead_letters(self) -> DataFrame:
        return self._frame("dlq").select("err.*")

    @functools.cached_property
    def log(self) -> DataFrame:
        if self._desc.dead_letter_table is not None:
            return self.dead_letters.select(*ERRS_COLUMNS)
        return self.errs if self._desc.envelope == "none" else self._frame("log").select(*_errs_fields())


def _errs_fields() -> list:
    return [F.col(f"err.{c}").alias(c) for c in ERRS_COLUMNS]
