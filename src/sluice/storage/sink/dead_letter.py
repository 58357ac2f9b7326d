"""Dead-letter sinks: a dead-letter table drained into a topic in Kafka Connect's
dead-letter format (seed 001, KIP-298), so that Connect's DLQ tooling and replay read it
unchanged.

Each dead-letter row is one message: the bad message's key and value bytes as they were
read and its original Kafka headers, then Connect's context headers, each value UTF-8 text
as Connect's `DeadLetterQueueReporter` writes them:

* `__connect.errors.topic` — the source's topic;
* `__connect.errors.partition`, `__connect.errors.offset` — where the message was, in decimal;
* `__connect.errors.connector.name` — the source that dead-lettered it (Connect names the
  connector whose task failed on the record);
* `__connect.errors.exception.message` — the error, the text of the table's `error` column.

Connect's other context headers are not written, because nothing here is what they name:
`task.id` (a Connect task: a source has no tasks of its own), `stage` and `class.name` (the
converter or transformation stage and its Java class: sluice's decode errors are rows of
data, not an exception thrown by a stage), `exception.class.name` and
`exception.stacktrace` (no exception is thrown). Writing made-up values would mislead the
tools that group by them.

It plugs into the sink engine as a `SinkEnvelope`: a row's identity is
its message's place (partition, offset). A dead-letter table is append-only and its rows
carry that place, so a step needs no delivered state: it reads only the commits of the
source's store past the source offsets the sink's last progress record says it delivered
(`read`, `{partition: next offset}`, which survives compaction: a compacted base keeps
every dead-letter row with its place), delivers their dead-letter rows past those
offsets, in offset order, and records where those commits end in the same transaction.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame

from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import InternalError
from sluice.kafka.progress import Progress
from sluice.spark.pyspark_code import F
from sluice.spark.session import spark
from sluice.storage.sink.changes import Change, Changes, Message
from sluice.storage.sink.envelope import SinkEnvelope
from sluice.storage.sink.state import SinkState
from sluice.storage.store import Store

HEADER_PREFIX = "__connect.errors."


def context_headers(topic: str, partition: int, offset: int, source: str, error: str) -> tuple[tuple[str, bytes], ...]:
    """Connect's context headers of a dead-lettered message (see the module docstring)."""
    return tuple(
        (HEADER_PREFIX + name, text.encode())
        for name, text in (
            ("topic", topic),
            ("partition", str(partition)),
            ("offset", str(offset)),
            ("connector.name", source),
            ("exception.message", error),
        )
    )


class DeadLetters(SinkEnvelope):
    """Rows of a dead-letter table → Kafka Connect DLQ messages."""

    def __init__(self, topic: str, source: str, item: Item | None = None) -> None:
        self.topic = topic  # the source's topic
        self.source = source
        self.item = item  # the source, whose store a step reads

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        identity = F.encode(F.format_string("%d:%d", "partition", "offset"), "UTF-8")
        # Bytes travel as base64 inside one JSON payload: Spark builds it natively, and the
        # driver decodes only the rows it writes.
        payload = F.to_json(
            F.struct(
                F.base64("key").alias("key"),
                F.base64("value").alias("value"),
                F.transform(
                    F.coalesce("headers", F.array()),
                    lambda h: F.struct(h["key"].alias("name"), F.base64(h["value"]).alias("value")),
                ).alias("headers"),
                F.col("error"),
                F.col("partition"),
                F.col("offset"),
            )
        )
        return identity, F.encode(payload, "UTF-8")

    def messages(self, change: Change) -> Iterator[Message]:
        if change.after is None or change.before is not None:
            return  # append-only: a row neither goes nor changes
        row = json.loads(change.after)
        original = tuple((h["name"], _bytes(h.get("value"))) for h in row["headers"])
        context = context_headers(self.topic, row["partition"], row["offset"], self.source, row["error"])
        for _ in range(change.count):
            yield Message(_bytes(row.get("key")), _bytes(row.get("value")), original + context)

    def stored_changes(self, stores: dict[str, Store], state: SinkState, progress: Progress) -> Changes:
        if self.item is None:  # `dead_letters` gives a sink's envelope its source
            raise InternalError.bug(f'the dead-letter sink of "{self.source}" without its source')
        return new_dead_letters(stores[self.item.id], self.item, self, state, progress)


def new_dead_letters(store: Store, source: Item, envelope: SinkEnvelope, state: SinkState, progress: Progress) -> Changes:
    """The dead-letter rows `store` (the source's) committed past the offsets `progress`
    delivered, in the order of their messages, with the Kafka headers each keeps (none,
    from a store written before dead-letter rows kept them), and where the commits read
    end (`Changes.read`)."""
    since = _delivered_offsets(state, progress)
    try:
        rows, end = store.dead_letters_since(spark(), source, {int(p): o for p, o in since.items()})
        found = dead_letter_messages(rows, envelope).toArrow()
    finally:
        store.release()
    identities, payloads = (found.column(i).to_pylist() for i in (0, 1))
    count = len(identities)
    read = {str(p): o for p, o in end.items()}
    return Changes(identities, [None] * count, payloads, [1] * count, read=read, received=count)


def dead_letter_messages(rows: DataFrame, envelope: SinkEnvelope) -> DataFrame:
    """The (identity, payload) pairs of a dead-letter table's `rows`, in the order of their
    messages (EXPLAIN PYSPARK prints this too)."""
    headers = F.col("headers") if "headers" in rows.columns else F.lit(None).cast("array<struct<key:string,value:binary>>")
    frame = rows.select(F.col("message").alias("error"), "partition", "offset", "key", "value", headers.alias("headers"))
    return frame.orderBy("partition", "offset").select(*envelope.shape(frame))


def _delivered_offsets(state: SinkState, progress: Progress) -> dict[str, int]:
    """`{partition: next offset}` whose dead-letter rows `progress` delivered — for a sink
    an older sluice delivered (a state of identities `partition:offset`, no `read`), past
    the last identity of each partition."""
    if progress.read is not None or progress.version == 0:
        return progress.read or {}
    since: dict[str, int] = {}
    for identity in state.delivered(progress.version).column("identity").to_pylist():
        partition, offset = identity.decode().split(":")
        since[partition] = max(since.get(partition, 0), int(offset) + 1)
    return since


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def dead_letters(sink: Item, catalog: Catalog) -> DeadLetters:
    """The envelope of a sink from a dead-letter table."""
    source = catalog.by_id(catalog.by_id(sink.sink_desc.source).dead_letter_desc.source)
    return DeadLetters(source.source_desc.topic, source.name, source)
