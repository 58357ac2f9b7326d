"""The extension point of sinks: how a relation's rows become identities, payloads and
messages.

How rows become identities, payloads and messages is a `SinkEnvelope`:
`shape(frame)` gives the two Spark columns (identity, payload) of the relation's frame,
and `messages(change)` turns one `Change` (identity, payload before, payload after, each
None when absent) into the `Message`s it writes (key, value, headers); `batch(changes)`
does it for a step's `Changes` at once (an envelope may do it without a Python object per
change). An envelope whose relation's changes are read from a store's commits rather than
found by diffing the relation (a dead-letter table's) says so with `stored_changes`. Which
envelope a sink gets is decided in one place, `envelopes.envelope_of`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame

from sluice.kafka.progress import Progress
from sluice.storage.sink.changes import Change, Changes, Message
from sluice.storage.sink.state import SinkState
from sluice.storage.store import Store


class SinkEnvelope:
    """How a sink's relation rows become messages (see the module docstring). `unique`:
    whether two rows with one identity are an error of the relation (an upsert key that is
    not unique) rather than a row held twice."""

    unique: bool = True

    def prepare(self) -> None:
        """Whatever must exist before the first step (registering schemas)."""

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        raise NotImplementedError

    def messages(self, change: Change) -> Iterator[Message]:
        raise NotImplementedError

    def batch(self, changes: Changes) -> Iterable[Message]:
        """The messages of a step's changes, in order."""
        return (message for change in changes for message in self.messages(change))

    def stored_changes(self, stores: dict[str, Store], state: SinkState, progress: Progress) -> Changes | None:
        """The step's changes read from the stores of what the relation reads, for an
        envelope whose relation keeps them there; None: they are found by diffing the
        relation against the delivered state (`SinkState.diff`)."""
        return None
