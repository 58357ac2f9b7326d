"""SUBSCRIBE: a relation's changes as `(mz_timestamp, mz_diff, columns…)` rows — first its
current contents, then, each time a source it reads commits a micro-batch (or a table it
reads is written), the difference from what was last emitted. An error in the relation
ends the subscription with the error's text; any other failure reaches the reader as a
`SqlError` too.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import Any

from sluice.errors import user_errors

POLL_SECONDS = 0.2


class Subscription:
    """An iterator of change rows; `close()` ends it (from any thread)."""

    def __init__(
        self,
        columns: tuple[str, ...],
        evaluate: Callable[[], tuple[int, list[tuple]]],
        version: Callable[[], Hashable],
    ) -> None:
        self.columns = ("mz_timestamp", "mz_diff", *columns)
        self._evaluate = evaluate
        self._version = version
        self._seen: Hashable = object()
        self._contents: Counter = Counter()
        self._pending: deque = deque()
        self._closed = False

    def __iter__(self) -> Subscription:
        return self

    @user_errors
    def __next__(self) -> tuple:
        while not self._pending:
            if self._closed:
                raise StopIteration
            if not self.poll():
                time.sleep(POLL_SECONDS)
        return self._pending.popleft()

    def poll(self) -> bool:
        """Queue the changes since the last poll; whether anything changed."""
        version = self._version()
        if version == self._seen:
            return False
        self._seen = version
        timestamp, rows = self._evaluate()
        contents = Counter(_hashable(row) for row in rows)
        removed, added = self._contents - contents, contents - self._contents
        self._contents = contents
        self._pending.extend((timestamp, -n, *row) for row, n in sorted(removed.items(), key=repr))
        self._pending.extend((timestamp, n, *row) for row, n in sorted(added.items(), key=repr))
        return bool(removed or added)

    @user_errors
    def snapshot(self) -> list[tuple]:
        """The current contents as changes (what SUBSCRIBE shows first)."""
        self.poll()
        rows = list(self._pending)
        self._pending.clear()
        return rows

    def close(self) -> None:
        self._closed = True


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value
