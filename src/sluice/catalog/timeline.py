"""Timelines: what a collection's timestamps mean (seed 004).

Two collections can be read by one dataflow only if they are on the same timeline.
`EpochMilliseconds` is wall-clock time; `User(name)` a timeline users share by name;
`External(name)` a source whose timestamps are its own (joinable only with itself);
`Counter(name)` a transaction counter (no source kind produces one).
"""

from __future__ import annotations

from dataclasses import dataclass

EPOCH_MILLISECONDS = "EpochMilliseconds"
USER = "User"
EXTERNAL = "External"
COUNTER = "Counter"


@dataclass(frozen=True, order=True)
class Timeline:
    kind: str
    name: str | None = None

    def __str__(self) -> str:
        return self.kind if self.name is None else f"{self.kind}({self.name})"

    @staticmethod
    def parse(text: str) -> Timeline:
        """The inverse of `str`, for the durable catalog."""
        if "(" not in text:
            return Timeline(text)
        kind, _, rest = text.partition("(")
        return Timeline(kind, rest[:-1])


EPOCH_MS = Timeline(EPOCH_MILLISECONDS)
