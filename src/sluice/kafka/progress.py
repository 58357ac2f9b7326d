"""Sinks' progress records on Kafka: the progress topic, its configuration, a sink's last
record, and what the records say was committed.

Every sink on a cluster records its progress in one topic, `_sluice-progress` (Materialize
keeps one per connection, `_materialize-progress-<region>-<connection id>`; a sluice
connection's id is only unique within its data directory, so the key, the sink's
identity, tells sinks apart). A record is written in the transaction of the step it
describes: `{"version": n, "rows": total written, "offset": the step's highest offset,
"read": …, "topic": the sink's topic, "written": {partition: [first offset, last offset,
count]}}` — `written` what the step itself wrote, `read` (a dead-letter sink's) the source
offsets whose rows are delivered.

**The topic.** Created with one partition and `cleanup.policy=compact`, as Materialize
creates its progress topic, with `retention.ms` and `retention.bytes` -1 besides: only a
newer record of the same key may remove a sink's last record, never its age or the
topic's size. A sink checks that configuration when it starts (`check_config`); a
progress topic that is not compacted is an error naming the setting, since a sink whose
record expired would start over and send its whole relation again.

**The last record.** Found by reading backwards from the partition's end in growing
windows (`last_record`), so a start reads the few newest records, not the topic's
history, whatever its length.

**The embedded broker.** librdkafka's mock cluster (`embedded.py`) keeps topic
configurations nowhere (DescribeConfigs is not answered) and compacts nothing: each
partition keeps its newest 5 MiB of batches, so the progress topic there holds some tens
of thousands of records — a sink's last record goes only once that many newer records of
other sinks follow it. Nor does it hide aborted transactions from `read_committed`
consumers (checked with librdkafka 2.16: it writes the transaction markers, but messages
of an aborted or still open transaction are returned as if committed). So on it a sink
treats a progress record it finds as its step's commit — the step's messages are there
too, since a record is written only once each of them is acknowledged — and sluice's own
readers (`sluice kafka consume --isolation read_committed`, `kafka-verify`) keep of a
sink's topic only the messages some progress record names (`committed_ranges`): what an
aborted or killed transaction wrote is there in the log but no record names it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sluice.errors import ExternalSystemError

PROGRESS_TOPIC = "_sluice-progress"

# What the progress topic is created with (see the module docstring).
PROGRESS_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}

# How long a sink's start may take to find its last record, and the first window read.
READ_SECONDS = 30.0
FIRST_WINDOW = 16


@dataclass
class Progress:
    version: int = 0
    rows: int = 0
    offset: int | None = None
    read: dict[str, int] | None = None  # a dead-letter sink's: see the module docstring
    topic: str | None = None
    written: dict[str, list[int]] | None = None  # partition: [first, last, count]

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__).encode()

    @staticmethod
    def from_json(value: bytes) -> Progress:
        return Progress(**json.loads(value))


def check_config(configs: dict[str, str]) -> None:
    """Raise unless the progress topic's `configs` (as the broker describes them) keep a
    sink's last record for good."""
    policy = configs.get("cleanup.policy", "delete")
    if "compact" not in policy.split(","):
        raise ExternalSystemError(
            f"progress topic '{PROGRESS_TOPIC}' has cleanup.policy={policy}: it must be compact,"
            " or a sink's progress expires with the topic's retention and the sink sends its whole relation again"
        )
    if "delete" in policy.split(","):
        for name in ("retention.ms", "retention.bytes"):
            if configs.get(name, "-1") != "-1":
                raise ExternalSystemError(
                    f"progress topic '{PROGRESS_TOPIC}' has {name}={configs[name]} with cleanup.policy={policy}:"
                    f" {name} must be -1, or a sink's progress expires and the sink sends its whole relation again"
                )


def last_record(consumer, key: bytes) -> tuple[Progress, int] | None:
    """The last record of `key` in the progress topic and its offset, read backwards from
    the partition's end, each window four times the last; None if it has none. `consumer`
    is assigned nothing yet, `enable.partition.eof` on."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + READ_SECONDS
    try:
        low, end = consumer.get_watermark_offsets(TopicPartition(PROGRESS_TOPIC, 0), timeout=READ_SECONDS)
    except KafkaException as e:
        raise ExternalSystemError(f"cannot read the sink's progress: {e.args[0].str()}") from None
    window = FIRST_WINDOW
    while end > low:
        start = max(low, end - window)
        found = _last_in(consumer, key, start, end, deadline)
        if found is not None:
            return found
        end, window = start, window * 4
    return None


def _last_in(consumer, key: bytes, start: int, end: int, deadline: float) -> tuple[Progress, int] | None:
    """The last record of `key` at offsets [start, end)."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(PROGRESS_TOPIC, 0, start)])
    found = None
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return found
            raise ExternalSystemError(f"cannot read the sink's progress: {error.str()}")
        offset = message.offset()
        if offset < end and message.key() == key and message.value() is not None:
            found = (Progress.from_json(message.value()), offset)
        # The window's last offset may be a transaction marker no message stands for.
        if offset >= end - 1:
            return found
    raise ExternalSystemError("cannot read the sink's progress: timed out")


def committed_ranges(records, topic: str) -> dict[int, list[tuple[int, int]]]:
    """`{partition: [(first, last), …]}` of `topic` that the progress `records` (messages
    of the progress topic, in order) name: the messages sinks wrote in committed steps."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for message in records:
        if message.value() is None:
            continue
        try:
            progress = Progress.from_json(message.value())
        except (ValueError, TypeError):
            continue  # not a sink's record
        if progress.topic != topic or not progress.written:
            continue
        for partition, (first, last, _count) in progress.written.items():
            ranges.setdefault(int(partition), []).append((first, last))
    return ranges

