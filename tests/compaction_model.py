"""Stores built commit by commit without a stream, for the compaction tests: each batch of
messages is written as the ingestion writes it (Parquet files under `__out=<kind>`, the
upsert state's retractions included) and committed through `Store.commit`, and a
reference model says what a read of the store must show after any number of batches."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType

from sluice.storage.location import disk, local
from sluice.storage.store import Store

_ARROW = pa.schema(
    [
        pa.field("row", pa.struct([("k", pa.string()), ("v", pa.int64())])),
        pa.field(
            "err",
            pa.struct(
                [
                    ("kind", pa.string()),
                    ("code", pa.string()),
                    ("message", pa.string()),
                    ("partition", pa.int32()),
                    ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC")),
                    ("key", pa.binary()),
                    ("value", pa.binary()),
                    ("mz_timestamp", pa.int64()),
                ]
            ),
        ),
        pa.field("__p", pa.int32()),
        pa.field("__o", pa.int64()),
        pa.field("__seen", pa.int64()),
        pa.field("__k", pa.binary()),
    ]
)
SCHEMA = StructType([StructField("__out", StringType()), *from_arrow_schema(_ARROW).fields])


@dataclass(frozen=True)
class Message:
    key: str
    value: int | None  # None: a tombstone (upsert) or a message without value (NONE)
    bad: bool  # a value that fails to decode
    partition: int = 0
    offset: int = 0

    @property
    def error(self) -> str:
        return f"Decode error: bad {self.key} at {self.partition}/{self.offset}"


def random_batches(rng: random.Random, count: int, size: int = 6) -> list[list[tuple[str, int | None, bool]]]:
    """`count` batches of (key, value, bad) with repeated keys, tombstones and errors."""
    return [
        [
            (rng.choice("abcde"), rng.choice([None, 1, 2, 3, 4]), rng.random() < 0.25)
            for _ in range(rng.randint(0, size))
        ]
        for _ in range(count)
    ]


class ModelStore:
    """A store fed batch by batch, with the model of what it holds."""

    def __init__(self, root: Path, upsert: bool, redirected: bool, partitions: int = 2) -> None:
        self.store = Store(local(root))
        self.store.save_schema(SCHEMA)
        self.upsert = upsert
        self.redirected = redirected
        self.partitions = partitions
        self.next = {p: 0 for p in range(partitions)}
        self.winners: dict[str, Message] = {}
        self.messages: list[Message] = []
        self.batches = 0

    def add(self, batch: list[tuple[str, int | None, bool]]) -> None:
        """Commit one micro-batch of (key, value, bad); a key keeps to one partition."""
        starts = dict(self.next)
        messages = []
        for key, value, bad in batch:
            partition = ord(key) % self.partitions
            messages.append(Message(key, value, bad and value is not None, partition, self.next[partition]))
            self.next[partition] += 1
        out: dict[str, list[dict]] = {}
        if self.upsert:
            self._upsert(messages, out)
        else:
            for m in messages:
                kind = "skip" if m.value is None else ("dlq" if self.redirected else "errs") if m.bad else "oks"
                out.setdefault(kind, []).append(self._row(m))
        self.messages += messages
        staging = disk(self.store.root) / f"batch-{self.batches}-model"
        written = staging / "out"
        written.mkdir(parents=True)
        for kind, rows in out.items():
            (written / f"__out={kind}").mkdir()
            pq.write_table(pa.Table.from_pylist(rows, _ARROW), written / f"__out={kind}" / "part-00000.parquet")
        self.store.commit(
            local(written),
            batch=self.batches,
            ingested_ms=self.batches,
            offsets={p: (starts[p], self.next[p]) for p in starts},
            redirected=self.redirected,
            upsert=self.upsert,
        )
        shutil.rmtree(staging)
        self.batches += 1

    def _upsert(self, messages: list[Message], out: dict[str, list[dict]]) -> None:
        """As `render.ingest.UpsertChanges` gives a batch: per key, its error messages,
        the old winner leaving, the latest message entering (its row and its `state` row;
        a tombstone enters nothing)."""
        for key in sorted({m.key for m in messages}):
            mine = [m for m in messages if m.key == key]
            for m in mine:
                if m.bad:
                    out.setdefault("dlq" if self.redirected else "log", []).append(self._row(m))
            old = self.winners.pop(key, None)
            if old is not None:
                out.setdefault("retract", []).append(self._row(old))
            latest = mine[-1]
            if latest.value is not None:
                self.winners[key] = latest
                out.setdefault("state", []).append({**self._row(latest), "__k": key.encode()})
                if not latest.bad:
                    out.setdefault("oks", []).append(self._row(latest))
                elif not self.redirected:
                    out.setdefault("errs", []).append(self._row(latest))
            out.setdefault("seen", []).append({**self._row(latest), "__seen": len(mine)})

    def _row(self, m: Message) -> dict:
        err = {
            "kind": "decode",
            "code": "XX000",
            "message": m.error,
            "partition": m.partition,
            "offset": m.offset,
            "timestamp": None,
            "key": m.key.encode(),
            "value": None,
            "mz_timestamp": self.batches,
        }
        return {"row": {"k": m.key, "v": m.value}, "err": err, "__p": m.partition, "__o": m.offset, "__seen": 0, "__k": None}

    def expected(self) -> dict[str, list]:
        """What a read must show: rows, standing errors, the error log, dead-letter rows."""
        bad = [m for m in self.messages if m.bad]
        if self.upsert:
            standing = list(self.winners.values())
            rows = [(m.key, m.value) for m in standing if not m.bad]
            errs = [] if self.redirected else [m.error for m in standing if m.bad]
        else:
            rows = [(m.key, m.value) for m in self.messages if m.value is not None and not m.bad]
            errs = [] if self.redirected else [m.error for m in bad]
        return {
            "oks": sorted(rows),
            "errs": sorted(errs),
            "log": sorted(m.error for m in bad),
            "dlq": sorted(m.error for m in bad) if self.redirected else [],
            "state": sorted((m.key.encode(), m.partition, m.offset) for m in self.winners.values()),
        }


def shown(collection, standing=None) -> dict[str, list]:
    """What a read of a store shows, in the shape of `ModelStore.expected`, in one job; and
    an upsert store's `standing` state."""
    parts = [
        collection.oks.select(F.lit("oks").alias("part"), F.col("k"), F.col("v"), F.lit(None).cast("string").alias("m")),
        *(
            frame.select(F.lit(part).alias("part"), F.lit(None).cast("string"), F.lit(None).cast("long"), "message")
            for part, frame in (("errs", collection.errs), ("log", collection.log), ("dlq", collection.dead_letters))
        ),
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionAll(part)
    got: dict[str, list] = {"oks": [], "errs": [], "log": [], "dlq": []}
    for part, k, v, message in union.collect():
        got[part].append((k, v) if part == "oks" else message)
    got["state"] = [] if standing is None else [tuple(r) for r in standing.collect()]
    return {part: sorted(values) for part, values in got.items()}
