"""A sink's transactional producer, its topics and its progress records.

**Exactly once.** Each sink has one transactional producer (`transactional.id` the
sink's identity, `sluice-sink-<uuid>`, see `sink_identity`). A step that has changes writes
the new state (`state/<version>`, fsynced) first, then, in one Kafka transaction, the
step's messages and — once every one of them is acknowledged — a progress record in the
connection's progress topic `_sluice-progress` (key the sink's identity, value the
version, the rows written in all, what this step wrote per partition — first and last
offset, count — and, for a dead-letter sink, `read`: `kafka/progress.py`; Materialize
keeps such a topic, `_materialize-progress-…`, keyed `mz-sink-<id>`), and commits; older
states are removed after. A message whose delivery report is an error (a broker away
longer than the transaction's timeout, `TRANSACTION_TIMEOUT_MS`), or a commit that fails,
aborts the transaction: no record is written for a step that was not delivered, and the
step is done again from the last committed state. On start the producer is initialised
(which fences a previous incarnation and aborts its open transaction), the sink reads its
last committed progress record with `isolation.level=read_committed` — backwards from the
progress topic's end, never its whole history — checks that the messages it names are in
the topic (a record naming offsets the topic does not hold is an error, not a place to
resume from), and resumes from the state of exactly that version, discarding any newer
state a crash left uncommitted. So whatever instant a process dies at, the topic read
with read_committed holds every change once: a step either committed (its state is the
one resumed from) or did not (it is computed again). On the embedded broker, which shows
aborted transactions to read_committed consumers, the same holds as sluice's own readers
see the topic (`kafka/progress.py`). A state written by an older sluice
(`state/<version>.arrow`, Arrow IPC) is rewritten in this layout when the sink starts
(`SinkState.upgrade`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, Producer

from sluice.catalog.items import Item
from sluice.catalog.secrets import connection_options
from sluice.catalog.store import Catalog
from sluice.errors import ExternalSystemError, InternalError
from sluice.kafka.client import KafkaReadError, connection_config, watermarks
from sluice.kafka.progress import (
    PROGRESS_CONFIG,
    PROGRESS_TOPIC,
    Progress,
    check_config,
    last_record,
)
from sluice.kafka.topics import create_topic, list_topics, topic_config
from sluice.storage.location import Location
from sluice.storage.sink.changes import Message

# How long a transaction may take before librdkafka aborts it (and a message not
# acknowledged within it fails); read at each use, so a test may shorten it.
TRANSACTION_TIMEOUT_MS = 60_000


def sink_identity(root: Location) -> str:
    """The sink's name on Kafka — its transactional id and progress key —
    `sluice-sink-<uuid>`, made when it first starts and kept in `<sink dir>/identity`: a
    catalog id names a sink in its data directory only, and two data directories' sinks
    sharing a progress key would resume from each other's progress."""
    path = root / "identity"
    try:
        return path.read_text()
    except FileNotFoundError:
        identity = f"sluice-sink-{uuid.uuid4().hex}"
        path.replace(identity.encode())
        return identity


class _Reports:
    """The delivery reports of a step's messages: per partition the first and last offset
    written and how many, and the first failure."""

    def __init__(self) -> None:
        self.written: dict[int, tuple[int, int, int]] = {}
        self.count = 0
        self.failure: str | None = None

    def __call__(self, error, message) -> None:
        if error is not None:
            self.failure = self.failure or error.str()
            return
        partition, offset = message.partition(), message.offset()
        first, last, count = self.written.get(partition, (offset, offset, 0))
        self.written[partition] = (min(first, offset), max(last, offset), count + 1)
        self.count += 1


class Delivery:
    """A sink's transactional producer, its topics and its progress records."""

    def __init__(self, sink: Item, catalog: Catalog, identity: str) -> None:
        self.sink = sink
        self.identity = identity
        self.desc = sink.sink_desc
        connection = catalog.by_id(self.desc.connection).connection_desc
        self.bootstrap = ",".join(connection.brokers)
        self.config = connection_config(connection_options(connection, catalog).all())
        self.progress_key = identity.encode()
        self.producer: Producer | None = None

    def open(self) -> Progress:
        """Create the topics if missing, check the progress topic's configuration, fence
        any earlier producer of this sink, and read the last committed progress."""
        existing = list_topics(self.bootstrap, self.config)
        topics = ((self.desc.topic, self.desc.partition_count or 1, None), (PROGRESS_TOPIC, 1, PROGRESS_CONFIG))
        for topic, partitions, settings in topics:
            if topic not in existing:
                try:
                    create_topic(self.bootstrap, topic, partitions, self.config, settings)
                except ExternalSystemError:
                    if topic not in list_topics(self.bootstrap, self.config):  # not a race lost
                        raise
        configs = topic_config(self.bootstrap, PROGRESS_TOPIC, self.config)
        if configs is not None:  # None: an embedded broker, which keeps none (kafka/progress.py)
            check_config(configs)
        self.producer = producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.identity,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                **self.config,
            }
        )
        producer.init_transactions(30)
        return self._verified(self._last_progress())

    def _last_progress(self) -> Progress:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.identity,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                **self.config,
            }
        )
        try:
            found = last_record(consumer, self.progress_key)
        finally:
            consumer.close()
        return Progress() if found is None else found[0]

    def _verified(self, progress: Progress) -> Progress:
        """`progress`, once the messages it says its step wrote are in the sink's topic: a
        record naming offsets past a partition's end (the topic deleted and made again,
        the broker's data lost) is not trusted, and the sink does not start on it."""
        if not progress.written:
            return progress
        topic = self.desc.topic
        try:
            marks = watermarks(self.bootstrap, topic, self.config)
        except KafkaReadError as e:
            raise ExternalSystemError(f"cannot read topic '{topic}': {e}") from None
        for partition, (_first, last, _count) in sorted(progress.written.items()):
            end = marks.get(int(partition), (0, 0))[1]
            if end <= last:
                raise ExternalSystemError(
                    f"the sink's progress record names offset {last} of partition {partition} of topic '{topic}',"
                    f" which ends at offset {end}: the topic lost messages the sink wrote"
                )
        return progress

    def deliver(self, messages: Iterable[Message], progress: Progress, read: dict[str, int] | None) -> Progress:
        """Write `messages` and the progress record after them in one transaction; the
        progress as committed (rows written, what the step wrote per partition, `read`).
        The record is written only once every message is acknowledged: a message not
        delivered (a broker away past the transaction's timeout), like a commit that
        fails, aborts the transaction, and the step is done again from the last committed
        state."""
        producer, topic = self._producer(), self.desc.topic
        timeout = TRANSACTION_TIMEOUT_MS / 1000
        reports = _Reports()
        written = 0
        try:
            producer.begin_transaction()
            for message in messages:
                self._produce(topic, message, reports)
                written += 1
            producer.flush(timeout)
            if reports.failure is not None or reports.count != written:
                failure = reports.failure or f"{written - reports.count} of {written} messages not acknowledged"
                raise ExternalSystemError(f"cannot write to topic '{topic}': {failure}")
            committed = Progress(
                progress.version + 1,
                progress.rows + written,
                max((last for _, last, _ in reports.written.values()), default=progress.offset),
                read,
                topic,
                {str(p): list(span) for p, span in sorted(reports.written.items())},
            )
            producer.produce(PROGRESS_TOPIC, key=self.progress_key, value=committed.to_json())
            producer.commit_transaction(timeout)
        except KafkaException as e:
            self._abort()
            raise ExternalSystemError(f"cannot write to topic '{topic}': {e.args[0].str()}") from None
        except BaseException:
            self._abort()
            raise
        return committed

    def _producer(self) -> Producer:
        """The producer `open` made (the job opens a delivery before its first step, and
        a new one after a fatal abort dropped it)."""
        if self.producer is None:
            raise InternalError.bug(f'sink "{self.sink.name}" delivering with no producer open')
        return self.producer

    def _produce(self, topic: str, message: Message, on_delivery) -> None:
        producer = self._producer()
        key, value, headers = message
        # The client takes a list, not a tuple.
        listed: list[tuple[str, str | bytes | None]] | None = list(headers) if headers else None
        while True:
            try:
                producer.produce(topic, value, key, headers=listed, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.1)

    def _abort(self) -> None:
        try:
            self._producer().abort_transaction(10)
        except KafkaException:
            self.producer = None  # fatal: the next start makes a new one

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(5)
            self.producer = None
