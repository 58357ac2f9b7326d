"""A continuously ingested source's committed micro-batches on disk, read back as a
`Collection`.

Layout of `<data dir>/streams/<source id>/`:

    checkpoint/                       Spark's: offsets, and an upsert source's state
    batches/<n>/__out=<kind>/*.parquet  what micro-batch n produced, one kind per folder
    commits/<n>.json                  written last; a batch is visible only once it exists
    schema.json                       the schema of the batch files

Kinds: `oks` (rows; for an upsert source, rows entering its state), `errs` (errors a query
fails with; upsert: entering its state), `retract` (upsert: `(__p, __o)` of messages that
left the state), `dlq` (dead-letter rows), `log` (upsert: every error message, for the
tolerance count), `skip` (ENVELOPE NONE messages without key and value), `seen` (upsert:
messages per key and batch). Because the source's rows, its errors and its dead-letter rows
of one micro-batch sit under one commit file, a restart never shows one without the other.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sluice.catalog.items import SourceDesc
from sluice.render.source import ERRS_COLUMNS, Collection

KINDS = ("oks", "errs", "retract", "dlq", "log", "skip", "seen")
IDENTITY = ["__p", "__o"]


@dataclass(frozen=True)
class Totals:
    """A source's counters since ingestion began."""

    messages: int = 0
    errors: int = 0
    dead_lettered: int = 0
    last_error_ms: int | None = None


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.checkpoint = root / "checkpoint"
        self.batches = root / "batches"
        self.commits = root / "commits"

    def exists(self) -> bool:
        return self.checkpoint.exists()

    def committed(self) -> list[int]:
        if not self.commits.exists():
            return []
        return sorted(int(p.stem) for p in self.commits.glob("*.json"))

    def commit_record(self, batch: int) -> dict | None:
        path = self.commits / f"{batch}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def last_commit(self) -> dict | None:
        committed = self.committed()
        return self.commit_record(committed[-1]) if committed else None

    def totals(self) -> Totals:
        last = self.last_commit()
        return Totals(**last["totals"]) if last else Totals()

    def save_schema(self, schema: StructType) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.root / "schema.json", schema.json())

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads((self.root / "schema.json").read_text()))

    def counts(self, directory: Path) -> dict[str, int]:
        """Rows per kind in a written batch directory, from the Parquet footers."""
        counts = {}
        for kind in KINDS:
            files = list((directory / f"__out={kind}").glob("*.parquet"))
            if kind == "seen":
                # One row per key and batch, holding how many messages the key had.
                counts[kind] = sum(
                    pc.sum(pq.read_table(f, columns=["__seen"]).column(0)).as_py() or 0 for f in files
                )
            else:
                counts[kind] = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        return counts

    def commit(self, batch: int, directory: Path, ingested_ms: int, redirected: bool, upsert: bool) -> None:
        """Publish a written batch: move it into place, then write its commit file."""
        counts = self.counts(directory)
        target = self.batches / str(batch)
        if target.exists():  # left by an attempt that died before committing
            shutil.rmtree(target)
        self.batches.mkdir(parents=True, exist_ok=True)
        os.replace(directory, target)
        before = self.totals()
        errors = counts["dlq"] + (counts["log"] if upsert else counts["errs"])
        messages = counts["seen"] if upsert else counts["oks"] + counts["errs"] + counts["dlq"] + counts["skip"]
        totals = Totals(
            before.messages + messages,
            before.errors + errors,
            before.dead_lettered + (counts["dlq"] if redirected else 0),
            ingested_ms if errors else before.last_error_ms,
        )
        self.commits.mkdir(parents=True, exist_ok=True)
        record = {"batch": batch, "ingested_ms": ingested_ms, "counts": counts, "totals": totals.__dict__}
        _atomic_write(self.commits / f"{batch}.json", json.dumps(record))

    def frame(self, spark: SparkSession, batches: list[int], kind: str) -> DataFrame:
        schema = self.schema()
        paths = [
            str(path)
            for batch in batches
            if (path := self.batches / str(batch) / f"__out={kind}").exists()
        ]
        if not paths:
            return spark.createDataFrame([], schema)
        return spark.read.schema(schema).parquet(*paths)

    def collection(self, spark: SparkSession, desc: SourceDesc) -> Collection:
        """The source as its batches committed now hold it: every kind is read from the
        same batches, though more may commit while the frames are made (an upsert row and
        the retraction replacing it land in one batch)."""
        batches = self.committed()

        def frame(kind: str) -> DataFrame:
            return self.frame(spark, batches, kind)

        redirected = desc.dead_letter_table is not None
        errs_columns = [F.col(f"err.{c}").alias(c) for c in ERRS_COLUMNS]
        dead_letters = frame("dlq").select("err.*")
        if desc.envelope == "none":
            oks = frame("oks").select("row.*")
            errs = frame("errs").select(*errs_columns)
            log = dead_letters.select(*ERRS_COLUMNS) if redirected else errs
            return Collection(oks, errs, oks, log, dead_letters)
        retracted = frame("retract").select(*IDENTITY)
        oks = frame("oks").join(retracted, IDENTITY, "left_anti").select("row.*")
        errs = frame("errs").join(retracted, IDENTITY, "left_anti").select(*errs_columns)
        log = dead_letters.select(*ERRS_COLUMNS) if redirected else frame("log").select(*errs_columns)
        return Collection(oks, errs, oks, log, dead_letters)

    def committed_offsets(self) -> dict[int, int]:
        """`{partition: next offset}` of the last micro-batch Spark committed (after its
        rows were committed here): what the stream has read."""
        commits = self.checkpoint / "commits"
        numbered = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
        if not numbered:
            return {}
        lines = (self.checkpoint / "offsets" / str(max(numbered))).read_text().splitlines()
        return {int(p): offset for p, offset in json.loads(lines[-1]).items()}


def _atomic_write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
