"""Reading a topic for a person or a test to look at: `sluice kafka consume`, and
`read_committed`, what the sqllogic runner's `kafka-verify` compares.

`consume` yields a header line, then one tab-separated line per message — partition, offset, key, value,
headers — with keys, values and headers in `encode.escaped` form (what `sluice kafka
produce` reads back as the same bytes), `NULL` for a null key or value, and headers as
`name=value` joined by `,`. It reads every partition from its end (or, asked, from its
beginning), and stops at the end of all of them when asked to, else when `stop` is set.

`read_committed` reads a topic from its beginning as a transactional consumer sees it
(`isolation.level=read_committed`: aborted and open transactions are not there), waiting
up to a bound for a number of messages and for the end of every partition.

Both read committed messages only — `consume` unless asked for `read_uncommitted` — and on
the embedded broker, whose consumers see aborted and open transactions as committed, a
sink's topic is filtered by the sinks' progress records (`SinkCommits`, see
`kafka/progress.py`): a message no record names is held until one does (its step
committed) or a later step's record does (it was aborted); what remains unnamed at the end
is an aborted or unfinished transaction's and is not shown. A topic no progress record
names is shown as it is.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, TopicPartition

from sluice.errors import ExternalSystemError, UndefinedObject
from sluice.kafka.client import KafkaReadError, TopicMissing, consumer, kafka_reason, watermarks
from sluice.kafka.encode import escaped
from sluice.kafka.progress import PROGRESS_TOPIC, committed_ranges
from sluice.kafka.topics import is_embedded

_POLL_SECONDS = 0.2
# How long reading the progress topic to its end may take.
_PROGRESS_SECONDS = 30.0


def message_line(message) -> str:
    """One message as a line: partition, offset, key, value, headers."""
    headers = ",".join(
        f"{escaped(name.encode())}={'NULL' if value is None else escaped(value)}"
        for name, value in message.headers() or ()
    )
    key, value = message.key(), message.value()
    return "\t".join((
        str(message.partition()),
        str(message.offset()),
        "NULL" if key is None else escaped(key),
        "NULL" if value is None else escaped(value),
        headers,
    ))


def consume(
    bootstrap: str,
    topic: str,
    *,
    from_beginning: bool = False,
    exit_at_end: bool = False,
    stop: threading.Event | None = None,
    isolation: str = "read_committed",
) -> Iterator[str]:
    """The lines of `topic`'s messages as they come (see the module's docstring). The end
    `exit_at_end` stops at is each partition's end when the call began."""
    try:
        marks = watermarks(bootstrap, topic, {})
        ends = {p: high for p, (_, high) in marks.items()}
        client = consumer(bootstrap, {"auto.offset.reset": "earliest", "isolation.level": isolation})
    except TopicMissing:
        raise UndefinedObject(f"topic '{topic}' does not exist on kafka at {bootstrap}") from None
    except KafkaReadError as e:
        raise ExternalSystemError(f"cannot read topic '{topic}' from kafka at {bootstrap}: {e}") from None
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    client.assign([TopicPartition(topic, p, start) for p in ends])
    # Partitions with nothing (more) to read before their end.
    done = {p for p, (low, high) in marks.items() if not from_beginning or low >= high}
    commits = SinkCommits.of(bootstrap, topic) if isolation == "read_committed" else None
    yield "partition\toffset\tkey\tvalue\theaders"
    try:
        while not (stop is not None and stop.is_set()) and not (exit_at_end and len(done) == len(ends)):
            polled = []
            for message, at_end in _polled(client, topic):
                if not at_end:
                    polled.append(message)
                    if message.offset() + 1 >= ends[message.partition()]:
                        done.add(message.partition())
                # A transactional topic ends in a commit marker no message stands for.
                elif message.offset() >= ends[message.partition()]:
                    done.add(message.partition())
            shown = polled if commits is None else commits.passed(polled)
            yield from map(message_line, shown)
    finally:
        client.close()
        if commits is not None:
            commits.close()


def _polled(client, topic: str) -> Iterator[tuple]:
    """One poll's messages, each with whether it is a partition's end event rather than a
    message; retriable errors are passed over, any other is an `ExternalSystemError`."""
    try:
        polled = client.consume(num_messages=500, timeout=_POLL_SECONDS)
    except KafkaException as e:
        raise ExternalSystemError(f"cannot read topic '{topic}': {kafka_reason(e.args[0].str())}") from None
    for message in polled:
        error = message.error()
        if error is None or error.code() == KafkaError._PARTITION_EOF:
            yield message, error is not None
        elif not error.retriable():
            raise ExternalSystemError(f"cannot read topic '{topic}': {kafka_reason(error.str())}")


def read_committed(bootstrap: str, topic: str, at_least: int, timeout: float) -> list:
    """`topic`'s committed messages in (partition, offset) order, once there are
    `at_least` of them and every partition is read to its end, or when `timeout` seconds
    have passed (a topic that does not exist yet is waited for too)."""
    deadline = time.monotonic() + timeout
    partitions = _partitions_when_there(bootstrap, topic, deadline)
    if partitions is None:
        return []
    client = consumer(bootstrap, {"isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    client.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    commits = SinkCommits.of(bootstrap, topic)
    messages: list = []
    at_end: set[int] = set()
    try:
        while time.monotonic() < deadline and not (len(messages) >= at_least and at_end >= set(partitions)):
            polled = []
            for message, ended in _polled(client, topic):
                if ended:
                    at_end.add(message.partition())
                else:
                    polled.append(message)
                    at_end.discard(message.partition())
            messages += polled if commits is None else commits.passed(polled)
    finally:
        client.close()
        if commits is not None:
            commits.close()
    return sorted(messages, key=lambda m: (m.partition(), m.offset()))


def _partitions_when_there(bootstrap: str, topic: str, deadline: float) -> list[int] | None:
    while True:
        try:
            return sorted(watermarks(bootstrap, topic, {}))
        except TopicMissing:
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_SECONDS)
        except KafkaReadError as e:
            raise ExternalSystemError(f"cannot read topic '{topic}' from kafka at {bootstrap}: {e}") from None


class SinkCommits:
    """On an embedded broker, which messages of a sink's topic its progress records name,
    read from the progress topic as they are written (see the module's docstring)."""

    def __init__(self, bootstrap: str, topic: str, forgotten: bool) -> None:
        self.topic = topic
        self.client = consumer(bootstrap, {"auto.offset.reset": "earliest"})
        self.client.assign([TopicPartition(PROGRESS_TOPIC, 0, OFFSET_BEGINNING)])
        # {partition: sorted [(first, last), …]} named by the records read so far.
        self.spans: dict[int, list[tuple[int, int]]] = {}
        self.pending: list = []
        self.at_end = False
        # The embedded broker drops a partition's oldest batches past 5 MiB: the records
        # of the steps before the first one left are gone, and their messages are shown.
        self.forgotten = forgotten
        self.floor: dict[int, int] = {}

    @classmethod
    def of(cls, bootstrap: str, topic: str) -> SinkCommits | None:
        """The filter of `topic` on the broker at `bootstrap`; None where the broker's own
        read_committed isolation holds (not an embedded broker) or no sink ever wrote."""
        if not is_embedded(bootstrap):
            return None
        try:
            low, _ = watermarks(bootstrap, PROGRESS_TOPIC, {})[0]
        except TopicMissing:
            return None
        except KafkaReadError as e:
            raise ExternalSystemError(f"cannot read topic '{PROGRESS_TOPIC}' from kafka at {bootstrap}: {e}") from None
        return cls(bootstrap, topic, low > 0)

    def passed(self, messages: list) -> list:
        """Of `messages` and those held before, the ones a progress record names, in
        order; those a later step's record passes over are dropped, the rest held."""
        self.pending += messages
        if not self.pending:
            return []
        if any(self._verdict(m.partition(), m.offset()) is None for m in self.pending):
            self._read_records()
        if not self.spans:  # not a sink's topic (yet)
            shown, self.pending = self.pending, []
            return shown
        shown, held = [], []
        for message in self.pending:
            verdict = self._verdict(message.partition(), message.offset())
            if verdict:
                shown.append(message)
            elif verdict is None:
                held.append(message)
        self.pending = held
        return shown

    def _verdict(self, partition: int, offset: int) -> bool | None:
        """True: a record names the message; False: a later step's record passes over it
        (its transaction was aborted); None: no record yet says."""
        spans = self.spans.get(partition, [])
        at = bisect.bisect_right(spans, (offset, float("inf")))
        if at and spans[at - 1][1] >= offset:
            return True
        if self.forgotten and offset < self.floor.get(partition, 0):
            return True
        return False if at < len(spans) else None

    def _read_records(self) -> None:
        """Read the progress records written since the last call: to the partition's end
        (once reached, a short poll tells whether more came)."""
        records = []
        deadline = time.monotonic() + _PROGRESS_SECONDS
        while True:
            try:
                polled = self.client.consume(num_messages=500, timeout=0.05 if self.at_end else _POLL_SECONDS)
            except KafkaException as e:
                raise ExternalSystemError(f"cannot read topic '{PROGRESS_TOPIC}': {kafka_reason(e.args[0].str())}") from None
            if not polled and self.at_end:
                break
            if not polled and time.monotonic() > deadline:
                raise ExternalSystemError(f"cannot read topic '{PROGRESS_TOPIC}': timed out")
            for message in polled:
                error = message.error()
                if error is None:
                    records.append(message)
                    self.at_end = False
                elif error.code() == KafkaError._PARTITION_EOF:
                    self.at_end = True
        for partition, spans in committed_ranges(records, self.topic).items():
            self.floor.setdefault(partition, min(first for first, _ in spans))
            for span in spans:
                bisect.insort(self.spans.setdefault(partition, []), span)

    def close(self) -> None:
        self.client.close()
