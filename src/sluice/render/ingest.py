"""Continuous ingestion: one Spark streaming query per source, reading its topic once per
micro-batch and committing the batch's rows, errors and dead-letter rows together (see
`store`). An upsert source keeps its state — the winning message of every key, errors
included — in Spark's state store (RocksDB) and emits changes: the message that left the
state (−) and the one that entered it (+).

`Streams` owns a session's ingestions: it starts them, waits for them to catch up with the
offsets a query must see (read-your-writes), and stops them.
"""

from __future__ import annotations

import functools
import json
import operator
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType

from sluice.catalog.items import Item, SourceDesc
from sluice.catalog.store import Catalog
from sluice.errors import ExternalSystemError, SqlError
from sluice.kafka.client import KafkaReadError, connection_config, watermarks
from sluice.kafka.reader import NAME
from sluice.render.source import (
    SourceRead,
    reader_options,
    source_messages,
    source_parts,
    state_columns,
    with_decode_errors,
)
from sluice.render.store import Store

# How often an idle stream asks Kafka for new offsets.
TRIGGER = "100 milliseconds"


class SourceStreamFailed(SqlError):
    """A source's ingestion stopped with an error (its broker went away, …)."""

    code = "XX000"


class CatchUpTimeout(SqlError):
    code = "57014"


class UpsertState(StatefulProcessor):
    """Per upsert key (its raw bytes): the winning message's (partition, offset).

    Out, per key and micro-batch: every error message (`__log`, for the dead-letter table
    and the tolerance count), the old winner leaving the state (`__diff` −1, identity only)
    and the new one entering it (+1; a tombstone enters nothing), and on the first row the
    number of messages the key had (`__seen`)."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns

    def init(self, handle) -> None:
        self.winner = handle.getValueState("winner", "partition int, offset long")

    def handleInputRows(self, key, rows, timerValues=None):
        rows = list(rows)
        out = [self._out(r.asDict(), 0, True) for r in rows if r["__error"] is not None]
        latest = max(rows, key=lambda r: (r["partition"], r["offset"]))
        if self.winner.exists():
            partition, offset = self.winner.get()
            out.append(self._out({"partition": partition, "offset": offset}, -1, False))
        if latest["value"] is None and latest["__error"] is None:
            self.winner.clear()
        else:
            self.winner.update((latest["partition"], latest["offset"]))
            out.append(self._out(latest.asDict(), 1, False))
        if not out:
            out.append(self._out({}, 0, False))
        out[0]["__seen"] = len(rows)
        for values in out:
            yield Row(**values)

    def _out(self, values: dict, diff: int, log: bool) -> dict:
        row = {name: values.get(name) for name in self.columns}
        row.update(__diff=diff, __log=log, __seen=0)
        return row

    def close(self) -> None:
        pass


# What the upsert state decides on; every other column travels packed as one JSON text,
# since the state operator converts each column of each message into Python and back.
_DECIDING = ("__ukey", "partition", "offset", "__error", "value")


def _upsert_changes(messages: DataFrame) -> DataFrame:
    """An upsert source's messages through its state (see `UpsertState`)."""
    carried = [c for c in messages.columns if c not in _DECIDING]
    packed_type = messages.select(*carried).schema
    narrow = messages.select(*_DECIDING, F.to_json(F.struct(*carried)).alias("__packed"))
    schema = StructType(
        narrow.schema.fields
        + [
            StructField("__diff", IntegerType()),
            StructField("__log", BooleanType()),
            StructField("__seen", LongType()),
        ]
    )
    changes = narrow.groupBy("__ukey").transformWithState(
        UpsertState(narrow.columns), schema, "Append", "None"
    )
    unpacked = F.from_json("__packed", packed_type)
    return changes.select(
        *(c for c in changes.columns if c != "__packed"), *(unpacked[c].alias(c) for c in carried)
    )


@dataclass
class Ingestion:
    item: Item
    store: Store
    query: StreamingQuery | None = None

    @property
    def desc(self) -> SourceDesc:
        return self.item.details

    def start(self, spark: SparkSession, catalog: Catalog, read: SourceRead) -> None:
        desc = self.desc
        starts = self.store.recover(
            self.item.name,
            {p: start for p, start, _ in read.ranges},
            desc.envelope != "none",
            lambda: _low_marks(self.item, catalog),
        )
        raw = (
            spark.readStream.format(NAME)
            .options(**reader_options(desc, catalog))
            .option("start_offsets", json.dumps({str(p): start for p, start in starts.items()}))
            .load()
        )
        messages = source_messages(with_decode_errors(raw, desc), desc)
        if desc.envelope != "none":
            messages = _upsert_changes(messages.select(*state_columns(messages, desc)))
        self.store.save_schema(self._out(messages, 0).schema)
        self.query = (
            messages.writeStream.foreachBatch(self._commit)
            .option("checkpointLocation", str(self.store.checkpoint))
            .trigger(processingTime=TRIGGER)
            .queryName(f"sluice-source-{self.item.name}-{self.item.id}")
            .start()
        )

    def _out(self, messages: DataFrame, ingested_ms: int) -> DataFrame:
        """One row per (message, kind it goes to): the batch files' rows."""
        desc = self.desc
        redirected = desc.dead_letter_table is not None
        parts = source_parts(messages, desc, self.item)
        error_kind = "dlq" if redirected else "errs"
        if desc.envelope == "none":
            kinds = [
                F.when(parts.ok, F.lit("oks")),
                F.when(parts.failed, F.lit(error_kind)),
                F.when(parts.skipped, F.lit("skip")),
            ]
        else:
            diff, log = F.col("__diff"), F.col("__log")
            kinds = [
                F.when((diff == 1) & parts.ok, F.lit("oks")),
                F.when((diff == 1) & parts.failed & F.lit(not redirected), F.lit("errs")),
                F.when(diff == -1, F.lit("retract")),
                F.when(log, F.lit("dlq" if redirected else "log")),
                F.when(F.col("__seen") > 0, F.lit("seen")),
            ]
        seen = F.col("__seen") if desc.envelope != "none" else F.lit(None).cast("long")
        return messages.select(
            F.explode(F.array_compact(F.array(*kinds))).alias("__out"),
            F.struct(*parts.oks).alias("row"),
            F.struct(*parts.errs, F.lit(ingested_ms).cast("long").alias("mz_timestamp")).alias("err"),
            F.col("partition").alias("__p"),
            F.col("offset").alias("__o"),
            seen.alias("__seen"),
        )

    def _commit(self, batch: DataFrame, n: int) -> None:
        upsert = self.desc.envelope != "none"
        adds = self.store.batch_offsets(n, upsert)
        if adds is None:
            return  # run again after a restart: every offset it read is committed already
        offsets, below = adds
        if below:  # read from an older checkpoint: keep only what is not committed yet
            batch = batch.where(
                ~functools.reduce(
                    operator.or_,
                    ((F.col("partition") == p) & (F.col("offset") < start) for p, start in below.items()),
                )
            )
        ingested_ms = int(time.time() * 1000)
        staging = Path(tempfile.mkdtemp(prefix=f"batch-{n}-", dir=self.store.root))
        written = staging / "out"
        self._out(batch, ingested_ms).write.partitionBy("__out").parquet(str(written))
        self.store.commit(
            written,
            batch=n,
            ingested_ms=ingested_ms,
            offsets=offsets,
            redirected=self.desc.dead_letter_table is not None,
            upsert=upsert,
        )
        shutil.rmtree(staging)

    def stop(self) -> None:
        self.store.close()
        if self.query is not None:
            self.query.stop()
            self.query = None

    def failure(self) -> str | None:
        if self.query is None:
            return None
        error = self.query.exception()
        return None if error is None else (error.getMessage() if hasattr(error, "getMessage") else str(error))


def _low_marks(item: Item, catalog: Catalog) -> dict[int, int]:
    """The source's topic's first offsets per partition (what retention has kept)."""
    connection = catalog.by_id(item.details.connection).details
    try:
        config = connection_config(connection.properties)
        marks = watermarks(",".join(connection.brokers), item.details.topic, config)
    except KafkaReadError as e:
        raise ExternalSystemError(f"Source error: {item.name}: {e}") from None
    return {p: low for p, (low, _) in marks.items()}


class Streams:
    """The ingestions of one session, under `<data dir>/streams`."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "streams"
        self.running: dict[str, Ingestion] = {}

    def store(self, item_id: str) -> Store:
        return Store(self.root / item_id)

    def ingested(self, item_id: str) -> bool:
        return item_id in self.running or self.store(item_id).exists()

    def ensure(self, spark: SparkSession, catalog: Catalog, item_id: str, read) -> Ingestion:
        """The source's ingestion, started (or resumed from its checkpoint) if it is not
        running or its store needs repair (see `store`). `read` gives the snapshot read that
        fixes where the source starts reading its topic."""
        ingestion = self.running.get(item_id)
        if ingestion is not None and not ingestion.store.sound():
            self.running.pop(item_id).stop()  # its stream starts again, repairing the store first
            ingestion = None
        if ingestion is None:
            ingestion = Ingestion(catalog.by_id(item_id), self.store(item_id))
            ingestion.start(spark, catalog, read())
            self.running[item_id] = ingestion
        return ingestion

    def catch_up(self, item_id: str, targets: dict[int, int], timeout: float) -> None:
        """Wait until the source's stream has committed every offset below `targets`."""
        ingestion = self.running[item_id]
        deadline = time.monotonic() + timeout
        while True:
            failure = ingestion.failure()
            if failure is not None:
                raise SourceStreamFailed(
                    f'Source error: ingestion of source "{ingestion.item.name}" failed: {failure}'
                )
            read = ingestion.store.committed_offsets()
            behind = {p: t for p, t in targets.items() if t > read.get(p, 0)}
            if not behind:
                return
            if time.monotonic() > deadline:
                raise CatchUpTimeout(
                    f'timed out after {timeout:g}s waiting for source "{ingestion.item.name}" '
                    "to ingest its topic up to the offsets current when the statement started",
                    detail=", ".join(
                        f"partition {p}: read {read.get(p, 0)} of {t}" for p, t in sorted(behind.items())
                    ),
                )
            time.sleep(0.05)

    def drop(self, item_id: str) -> None:
        ingestion = self.running.pop(item_id, None)
        if ingestion is not None:
            ingestion.stop()
        shutil.rmtree(self.root / item_id, ignore_errors=True)

    def close(self) -> None:
        for ingestion in self.running.values():
            ingestion.stop()
        self.running.clear()
