"""The `sluice_kafka` PySpark Python data source: Kafka topic ranges as Arrow batches.

Rows have the schema of Spark's built-in Kafka source (key, value, topic, partition,
offset, timestamp, timestampType, headers), so a cluster with Spark's connector could swap
readers without touching anything downstream. A Kafka partition's offset range
`[start, end)` is read with one consumer, asking only for what is left in the range: no
fetch waits on a timeout for messages that cannot arrive. One Spark input partition (a read
task) reads one range or, when ranges are small, several one after another (`tasks`), as
Spark's file sources pack small files into one task: a task costs ~0.1 s whatever it reads
(its Python worker's round trip, its consumers), as much as 30,000 messages do.

Batch reads take their ranges from the `ranges` option (the session fixes them when a query
starts, so a snapshot is exactly the offsets current at that moment). Streaming reads keep
`{partition: next offset}` in Spark's checkpoint, never reading below `start_offsets` (and
failing when the topic's offsets fall below those `committed`), and
with `max_messages` a micro-batch reads about that many messages at most (`admitted`), so
that catching up with a long backlog never needs it all in one micro-batch's memory.

An upsert stream's read tasks keep only each key's latest message (`latest_per_key`, see
`_Columns`): a message its task reads a later one of the same raw key for is neither
decoded nor sent on, the later one counting it (`count`), unless its decode error must be
seen — a NULL key, a key or value that fails the checks the option names. What the stream
reduces per key afterwards (the latest by offset, how many messages a key had) comes out
the same; each micro-batch moves a fraction of its messages when keys repeat.

Offsets retention deleted before they were read are never skipped silently: by default the
read fails (Spark's `failOnDataLoss`); with `report_lost` each lost range arrives as one row
with NULL key and value at the range's first offset and the column `lost_end` (exclusive)
set — the only row where it is not NULL. Offsets going backwards (a topic deleted and created
again, a partition that lost data: its high watermark below what the stream has read, or
below a range being read) fail the read with `OffsetsRegressed`, never "nothing new".

Transient faults (a broker away, a leader moving, a schema registry timing out) only delay
a read: it waits them out under the source's `RetryPolicy` (the `retry` option) and fails
with `SourceUnavailable` once one outlasts it. A stream asks its topic's offsets through
one consumer kept for the stream's life.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluice.catalog import codec
from sluice.catalog.formats import FormatDesc
from sluice.catalog.items import DEFAULT_RETRY_DELAY_MAX_MS, DEFAULT_RETRY_TIMEOUT_MS
from sluice.errors import InternalError
from sluice.kafka import client
from sluice.kafka.client import (
    KafkaReadError,
    OffsetsRegressed,
    TopicWatermarks,
    regressed,
    regression,
)
from sluice.kafka.retry import RetryPolicy

NAME = "sluice_kafka"

RAW_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(_HEADER)),
    ]
)

# The text of a range retention deleted before it was read (first and last offset).
LOST_RANGE = "offsets %d to %d were deleted by retention before they were read"

# A producer sets a message's timestamp to any 64-bit number: one beyond the year 9999
# (which no query could hand back) reads as NULL, like a negative one.
MAX_TIMESTAMP_MS = 253_402_300_799_999

BATCH_SIZE = 10_000
# Messages a read task reads at least when ranges are packed together (see `tasks`).
TASK_MESSAGES = 100_000
# Messages a read task reduces to their keys' latest at once (`latest_per_key`): about
# 300 bytes of Python objects each, raw bytes apart.
LATEST_WINDOW = 200_000
# A read given no `retry` option (one outside a source) waits out faults as a source would.
DEFAULT_RETRY = RetryPolicy(DEFAULT_RETRY_TIMEOUT_MS / 1000, DEFAULT_RETRY_DELAY_MAX_MS / 1000)
# Bytes of keys and values per batch at most (and one message more): an Arrow column holds
# under 2 GiB, and a batch's error texts are three times the bytes they describe.
BATCH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Options:
    """The reader's options. Credentials come apart from the rest (`config_secret`: client
    properties; `decode_secret`: side → registry login) so that Spark redacts them, and
    are merged in here; `config` and `decode` are left out of `repr` for them."""

    bootstrap: str
    topic: str
    config: dict = field(repr=False)
    batch_size: int = BATCH_SIZE
    batch_bytes: int = BATCH_BYTES
    # A read that makes no progress for `retry.timeout` fails instead of hanging.
    retry: RetryPolicy = DEFAULT_RETRY
    # side ("key" / "value") → decoder spec; see `decoder`.
    decode: dict = field(default_factory=dict, repr=False)
    report_lost: bool = False
    # side ("key" / "value") → how its decode errors are found ("utf8", "decoded") for
    # the sides whose every failing message must be kept; None: keep every message.
    latest_per_key: dict | None = None

    @staticmethod
    def of(options) -> Options:
        config = json.loads(options.get("config", "{}"))
        config.update(json.loads(options.get("config_secret", "{}")))
        decode = json.loads(options.get("decode", "{}"))
        for side, login in json.loads(options.get("decode_secret", "{}")).items():
            decode[side] = {**decode[side], "login": login}
        return Options(
            bootstrap=options["bootstrap"],
            topic=options["topic"],
            config=config,
            batch_size=int(options.get("batch_size", BATCH_SIZE)),
            batch_bytes=int(options.get("batch_bytes", BATCH_BYTES)),
            retry=RetryPolicy.from_json(options["retry"]) if "retry" in options else DEFAULT_RETRY,
            decode=decode,
            report_lost=options.get("report_lost", "false") == "true",
            latest_per_key=json.loads(options["latest_per_key"]) if "latest_per_key" in options else None,
        )

    def schema(self) -> StructType:
        """The raw columns, then `<side>_data` and `<side>_error` for each decoded side, then
        `lost_end` when reporting lost ranges, then `count` when keeping each key's latest."""
        extra = []
        for side, spec in sorted(self.decode.items()):
            data_type = from_arrow_type(decoder(spec).arrow_type)
            extra += [StructField(f"{side}_data", data_type), StructField(f"{side}_error", StringType())]
        if self.report_lost:
            extra.append(StructField("lost_end", LongType()))
        if self.latest_per_key is not None:
            extra.append(StructField("count", LongType()))
        return StructType(RAW_SCHEMA.fields + extra)

    def consumer(self) -> Consumer:
        return client.consumer(self.bootstrap, self.config, self.retry)


def decode_spec(fmt: FormatDesc, registry_url: str | None = None) -> dict:
    """The spec of a side in `fmt`, to pass in the `decode` option: the format's catalog
    description and the URL of the schema registry it reads schemas from. A registry's
    login travels apart (`decode_secret`), merged in as "login": [username, password]."""
    spec = {"format": codec.encode(fmt)}
    if registry_url is not None:
        spec["registry"] = registry_url
    return spec


def decoder(spec: dict, retry: RetryPolicy = DEFAULT_RETRY):
    """The decoder of a spec (a registry's look-ups wait out faults by `retry`)."""
    fmt = codec.decode(FormatDesc, spec["format"])
    login = tuple(spec["login"]) if "login" in spec else None
    return fmt.decoder(spec.get("registry"), login, retry)


class Ranges(InputPartition):
    """The offset ranges (`(partition, start, end)`) one read task reads, in order."""

    def __init__(self, ranges: list[tuple[int, int, int]]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = ranges


def tasks(ranges: list[tuple[int, int, int]]) -> list[Ranges]:
    """The read tasks of `ranges` (the empty ones left out): one per range, unless that
    makes tasks of under `TASK_MESSAGES` messages; then as many tasks as there are such
    shares of the messages, each range going, largest first, to the task with the fewest
    (so tasks come out about even, and a partition is never split)."""
    ranges = [r for r in ranges if r[1] < r[2]]
    count = min(len(ranges), max(1, sum(end - start for _, start, end in ranges) // TASK_MESSAGES))
    if count == len(ranges):
        return [Ranges([r]) for r in ranges]
    groups: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
    sizes = [0] * count
    for r in sorted(ranges, key=lambda r: (r[1] - r[2], r[0])):
        fewest = sizes.index(min(sizes))
        groups[fewest].append(r)
        sizes[fewest] += r[2] - r[1]
    return [Ranges(sorted(g)) for g in groups]


def read_ranges(options: Options, ranges: list[tuple[int, int, int]]) -> Iterator[pa.RecordBatch]:
    for partition, start, end in ranges:
        yield from read_range(options, partition, start, end)


def read_range(options: Options, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """The messages of one partition with offsets in `[start, end)`, as Arrow batches."""
    if start >= end:
        return
    consumer = options.consumer()
    try:
        consumer.assign([TopicPartition(options.topic, partition, start)])
        yield from _consume(consumer, options, partition, start, end)
    finally:
        consumer.close()


def _consume(consumer, options: Options, partition: int, start: int, end: int):
    decoders = {side: decoder(spec, options.retry) for side, spec in sorted(options.decode.items())}
    columns = _Columns(decoders, options)
    position = start
    last_progress = time.monotonic()
    while position < end:
        messages = consumer.consume(num_messages=min(options.batch_size, end - position), timeout=1.0)
        # While a broker is away the consumer reconnects by itself and `consume` returns
        # nothing (or transient errors): the read waits, up to the retry bound.
        messages = [m for m in messages if m.error() is None or not client.transient(m.error())]
        if not messages:
            if time.monotonic() - last_progress > options.retry.timeout:
                cause = consumer.last_fault or "the broker sent nothing"
                raise options.retry.exhausted(
                    f"topic {options.topic!r} partition {partition}: no message at offset {position} "
                    f"(range ends at {end}): {cause}"
                )
            continue
        last_progress = time.monotonic()
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._AUTO_OFFSET_RESET:
                    low = _skip_lost(consumer, options, partition, position, end, columns)
                    position = min(low, end)
                    break
                if error.code() == KafkaError._PARTITION_EOF:
                    # The range was computed from the high watermark, so reaching the end of
                    # the partition early means the rest was deleted: nothing more to read.
                    position = end
                    break
                raise KafkaReadError(
                    f"reading topic {options.topic!r} partition {partition}: {error.str()}"
                )
            offset = message.offset()
            if offset >= end:
                position = end
                break
            columns.add(message, offset)
            position = offset + 1
            if columns.size >= options.batch_bytes:
                yield from columns.batches(options.topic, partition)
                columns = _Columns(decoders, options)
        if columns.full():
            yield from columns.batches(options.topic, partition)
            columns = _Columns(decoders, options)
    if len(columns):
        yield from columns.batches(options.topic, partition)


def _skip_lost(consumer, options: Options, partition: int, position: int, end: int, columns) -> int:
    """Retention deleted `position` before it was read: report `[position, low)` (or fail)
    and go on from the low watermark, which it returns."""
    where = TopicPartition(options.topic, partition)
    low, high = consumer.get_watermark_offsets(where, timeout=10.0, cached=False)
    if low <= position:
        # Not retention: the partition now ends below an offset it held when the range was fixed.
        raise OffsetsRegressed(regressed(partition, high, f"offset {position} of the range being read"))
    if not options.report_lost:
        raise KafkaReadError(f"topic {options.topic!r} partition {partition}: " + LOST_RANGE % (position, low - 1))
    columns.add_lost(position, min(low, end))
    if low < end:
        # Reassigning is the way out of the consumer's offset-reset error state.
        consumer.assign([TopicPartition(options.topic, partition, low)])
    return low


class _Columns:
    """The messages of Arrow batches to come, each of up to `batch_size` rows (decoded
    sides, then `lost_end`, then `count`, last). Messages are kept as the consumer gave
    them and taken apart only when sent on.

    With `latest_per_key` the messages of a window (up to `LATEST_WINDOW` of them) are
    reduced to each raw key's latest before any is decoded: one raw key is one upsert key
    (decoding is a function of the bytes). Every message whose error the stream must see
    is kept beside it: a NULL key's (a lost range's too), every message of a key that
    fails its check, a superseded value that fails its check. A kept latest message's
    `count` is how many messages of the window it stands for."""

    def __init__(self, decoders: dict, options: Options) -> None:
        self.decoders = decoders
        self.batch_size = options.batch_size
        self.latest = options.latest_per_key
        self.window = options.batch_size if self.latest is None else max(options.batch_size, LATEST_WINDOW)
        # Row index → end of the lost range that row stands for (None: not reporting).
        self.lost_end: dict[int, int] | None = {} if options.report_lost else None
        # The consumer's messages (None for a lost range) and their offsets.
        self.messages: list = []
        self.offsets: list[int] = []
        # Raw key → row indexes of its messages, in offset order, and the rows without a
        # key (NULL keys, lost ranges) (with `latest_per_key`).
        self.by_key: dict[bytes, list[int]] = {}
        self.unkeyed: list[int] = []
        # Bytes of the keys and values so far.
        self.size = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def full(self) -> bool:
        return len(self.offsets) >= self.window

    def add(self, message, offset: int) -> None:
        key = message.key()
        self.size += len(key or b"") + len(message.value() or b"")
        if self.latest is not None:
            if key is None:
                self.unkeyed.append(len(self.offsets))
            else:
                self.by_key.setdefault(key, []).append(len(self.offsets))
        self.messages.append(message)
        self.offsets.append(offset)

    def add_lost(self, start: int, end: int) -> None:
        if self.lost_end is None:  # `_skip_lost` fails a read that does not report lost ranges
            raise InternalError.bug("a lost range kept by a read that does not report them")
        self.lost_end[len(self.offsets)] = end
        self.unkeyed.append(len(self.offsets))
        self.messages.append(None)
        self.offsets.append(start)

    def _kept(self, checks: dict) -> dict[int, int]:
        """Row index → how many messages it stands for, of the rows sent on (`checks`:
        the read's `latest_per_key`)."""
        kept = dict.fromkeys(self.unkeyed, 1)
        keys = list(self.by_key)
        failing = self._fails(checks, "key", keys, [self.offsets[self.by_key[k][-1]] for k in keys])
        older: list[tuple[int, int]] = []  # superseded rows of keys that pass, with the row superseding each
        for key, fails in zip(keys, failing):
            rows = self.by_key[key]
            if fails:
                kept.update(dict.fromkeys(rows, 1))
            else:
                kept[rows[-1]] = len(rows)
                if "value" in checks:
                    older += ((row, rows[-1]) for row in rows[:-1])
        values = [self.messages[row].value() for row, _ in older]
        offsets = [self.offsets[row] for row, _ in older]
        for (row, latest), fails in zip(older, self._fails(checks, "value", values, offsets)):
            if fails:
                kept[row] = 1
                kept[latest] -= 1
        return kept

    def _fails(self, checks: dict, side: str, payloads: list, offsets: list) -> list[bool]:
        """Whether each payload fails `side`'s check (none does on a side not checked)."""
        check = checks.get(side)
        if check is None or not payloads:
            return [False] * len(payloads)
        if check == "utf8":
            return [p is not None and not _valid_utf8(p) for p in payloads]
        _, errors = self.decoders[side].columns(payloads, offsets)
        return errors.is_valid().to_pylist()

    def batches(self, topic: str, partition: int) -> Iterator[pa.RecordBatch]:
        rows: Sequence[int]
        if self.latest is None:
            rows, counts = range(len(self.offsets)), None
        else:
            kept = self._kept(self.latest)
            rows = sorted(kept)
            counts = [kept[i] for i in rows]
        for first in range(0, len(rows), self.batch_size):
            last = first + self.batch_size
            yield self._batch(topic, partition, rows[first:last], None if counts is None else counts[first:last])

    def _batch(self, topic: str, partition: int, rows, counts: list[int] | None) -> pa.RecordBatch:
        n = len(rows)
        messages = [self.messages[i] for i in rows]
        offsets = [self.offsets[i] for i in rows]
        keys = [None if m is None else m.key() for m in messages]
        values = [None if m is None else m.value() for m in messages]
        stamps = [(0, -1) if m is None else m.timestamp() for m in messages]
        headers = [None if m is None else m.headers() for m in messages]
        decoded = []
        for side, side_decoder in self.decoders.items():
            decoded += side_decoder.columns(keys if side == "key" else values, offsets)
        raw = pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array(
                    [ms * 1000 if 0 <= ms <= MAX_TIMESTAMP_MS else None for _, ms in stamps],
                    pa.timestamp("us", tz="UTC"),
                ),
                pa.array([max(kind - 1, 0) if kind else 0 for kind, _ in stamps], pa.int32()),
                pa.array(
                    [[{"key": k, "value": v} for k, v in h] if h else [] for h in headers], pa.list_(_HEADER)
                ),
            ],
            schema=ARROW_SCHEMA,
        )
        names = [f"{side}_{part}" for side in self.decoders for part in ("data", "error")]
        if self.lost_end is not None:
            decoded.append(
                pa.array([self.lost_end.get(i) for i in rows], pa.int64())
                if self.lost_end
                else pa.nulls(n, pa.int64())
            )
            names.append("lost_end")
        if counts is not None:
            decoded.append(pa.array(counts, pa.int64()))
            names.append("count")
        if not decoded:
            return raw
        return pa.RecordBatch.from_arrays(raw.columns + decoded, names=ARROW_SCHEMA.names + names)


def _valid_utf8(payload: bytes) -> bool:
    if payload.isascii():
        return True
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def watermarks(options: Options) -> dict[int, tuple[int, int]]:
    return client.watermarks(options.bootstrap, options.topic, options.config, options.retry)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.options = Options.of(options)
        self.ranges = [tuple(r) for r in json.loads(options["ranges"])]

    def partitions(self) -> list[Ranges]:
        return tasks(self.ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # With no ranges Spark still runs one task, handing it a bare InputPartition.
        if not isinstance(partition, Ranges):
            return iter(())
        return read_ranges(self.options, partition.ranges)


def admitted(start: dict, highs: dict, most: int) -> dict:
    """Where a micro-batch from `start` ends when it may read about `most` messages of what
    lies before `highs` (both `{"<partition>": offset}`): each partition gets its share of
    the backlog, rounded up so that every partition with one moves on (Spark's Kafka
    source divides `maxOffsetsPerTrigger` the same way)."""
    backlog = {p: max(high - start.get(p, 0), 0) for p, high in highs.items()}
    total = sum(backlog.values())
    if total <= most:
        return highs
    return {p: start.get(p, 0) + -(-backlog[p] * most // total) for p in highs}


class KafkaStreamReader(DataSourceStreamReader):
    """Offsets are `{"<partition>": next offset}`; new partitions start at their low mark.

    Spark keeps this reader in one Python process on the driver for the stream's life and
    calls `stop` when the stream stops: the topic's offsets are asked through one consumer
    kept open in between (`TopicWatermarks`). Executors read with readers of their own."""

    def __init__(self, options) -> None:
        self.options = Options.of(options)
        self.start = {int(k): v for k, v in json.loads(options.get("start_offsets", "{}")).items()}
        self.max_messages = int(options.get("max_messages", 0))
        # What the source had committed when the stream started (`{partition: next offset}`).
        self.committed = {int(k): v for k, v in json.loads(options.get("committed", "{}")).items()}
        self._first = True
        self._watermarks: TopicWatermarks | None = None

    def watermarks(self) -> dict[int, tuple[int, int]]:
        if self._watermarks is None:
            o = self.options
            self._watermarks = TopicWatermarks(o.bootstrap, o.topic, o.config, o.retry)
        return self._watermarks.get()

    def initialOffset(self) -> dict:
        return {str(p): self.start.get(p, low) for p, (low, _) in self.watermarks().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_messages) if self.max_messages > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        marks = self.watermarks()
        if start is not None:
            # Committed offsets the topic no longer reaches would be taken for a batch of
            # nothing, and the topic's offsets below them never read. Spark's `start` is
            # the end of the last batch, committed — but at the first call, where it may
            # be a START OFFSET past the topic's end.
            read = self.committed if self._first else {int(p): offset for p, offset in start.items()}
            self._first = False
            fault = regression(read, {p: high for p, (_, high) in marks.items()})
            if fault is not None:
                raise OffsetsRegressed(fault)
        highs = {str(p): high for p, (_, high) in marks.items()}
        if start is None or not isinstance(limit, ReadMaxRows):
            return highs
        return admitted(start, highs, limit.max_rows)

    def partitions(self, start: dict, end: dict) -> list[Ranges]:
        # A checkpoint older than `start_offsets` resumes below them: what lies there was
        # read already.
        begins = {p: max(start.get(p, 0), self.start.get(int(p), 0)) for p in end}
        return tasks(sorted((int(p), begins[p], high) for p, high in end.items()))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Ranges):  # a stream's tasks are those `partitions` planned
            raise InternalError.bug(f"a stream's read of a {type(partition).__name__}, not of offset ranges")
        return read_ranges(self.options, partition.ranges)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()
            self._watermarks = None


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return Options.of(self.options).schema()

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)
