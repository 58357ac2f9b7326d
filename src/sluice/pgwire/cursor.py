"""A cursor DECLAREd in a transaction block: a query's rows, or a SUBSCRIBE's changes
gathered by a thread of its own as they arrive, for FETCH to take (with FETCH's timeout)
and for a cancel to interrupt.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any

from sluice.errors import SqlError


class Cursor:
    """A cursor DECLAREd in a transaction block: a query's rows, or a SUBSCRIBE's changes,
    gathered by a thread of its own as they arrive, for FETCH to take."""

    def __init__(self, columns: list[tuple[str, int, int]], rows: list[tuple] | None = None, subscription: Any = None) -> None:
        self.columns = columns
        self.rows = deque(rows or ())
        self.subscription = subscription
        self.changes: queue.Queue = queue.Queue()
        if subscription is not None:
            threading.Thread(target=self._gather, name="sluice-pgwire-cursor", daemon=True).start()

    def _gather(self) -> None:
        try:
            for row in self.subscription:
                self.changes.put(("row", row))
        except SqlError as e:
            self.changes.put(("error", e))
        self.changes.put(("end", None))

    def take(self, count: int | None, timeout: float | None) -> list[tuple]:
        """Up to `count` rows (None: all there are); from a subscription, what arrives
        within `timeout` seconds — without one, waiting for the first."""
        if self.subscription is None:
            n = len(self.rows) if count is None else min(count, len(self.rows))
            return [self.rows.popleft() for _ in range(n)]
        taken: list[tuple] = []
        try:
            item = self.changes.get(timeout=timeout)
            while True:
                kind, value = item
                if kind == "error":
                    raise value
                if kind != "row":  # the end, or a cancel (`interrupt`)
                    self.changes.put(item)
                    return taken
                taken.append(value)
                if count is not None and len(taken) >= count:
                    return taken
                item = self.changes.get_nowait()
        except queue.Empty:
            return taken

    def interrupt(self) -> None:
        self.changes.put(("cancel", None))

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()
