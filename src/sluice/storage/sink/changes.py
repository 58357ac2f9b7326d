"""What a sink step hands from its relation to Kafka: the `Changes` of its rows — each an
identity with its payload before and after — and the `Message`s an envelope makes of them
(`envelope`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple


class Message(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()  # a Kafka header may have no value


@dataclass(frozen=True)
class Change:
    """A row identity whose payload changed between two delivered snapshots: None before
    means it was added, None after that it went. `count` is how many times (a relation
    without a key may hold a row several times)."""

    identity: bytes
    before: bytes | None
    after: bytes | None
    count: int = 1


@dataclass
class Changes:
    """A step's changes, column by column as they come from Spark (`Change`s on
    iteration), with what the step found beside them: the guard flags set in some row of
    the relation (`flagged`), an identity two rows share (`duplicate`, for an envelope
    whose identities are unique), and, for a dead-letter sink, the source offsets whose
    rows it read (`read`)."""

    identity: list[bytes] = field(default_factory=list)
    before: list[bytes | None] = field(default_factory=list)
    after: list[bytes | None] = field(default_factory=list)
    count: list[int] = field(default_factory=list)
    flagged: frozenset[str] = frozenset()
    duplicate: bytes | None = None
    read: dict[str, int] | None = None
    received: int = 0  # rows the driver received to find them
    seconds: dict[str, float] = field(default_factory=dict)  # what its parts took

    def __len__(self) -> int:
        return len(self.identity)

    def __iter__(self) -> Iterator[Change]:
        return map(Change, self.identity, self.before, self.after, self.count)
