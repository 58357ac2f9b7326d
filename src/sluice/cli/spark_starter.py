"""Spark's start-up for the shell: `SparkStarter` starts sluice's Spark session in a
background thread, so that the prompt comes first and only a statement that needs Spark
waits for it; a failed start is reported to that statement, and the next one tries again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sluice.errors import ExternalSystemError


class SparkStarter:
    """Starts sluice's Spark session in a background thread (importing pyspark alone takes
    seconds), so that the prompt does not wait for it. `factory` makes the session."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        # Called on the starting thread once the start-up has ended (well or not).
        self.on_ready: Callable[[], None] | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.session: Any = None
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.took = 0.0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._ready.clear()
        self.error = None
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="sluice-spark-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.session = self._factory()
        except Exception as e:  # reported to whichever statement waits for Spark
            self.error = e
        finally:
            self.took = time.monotonic() - self.started_at
            self._ready.set()
        if self.on_ready is not None:
            self.on_ready()

    def wait(self, timeout: float) -> bool:
        """Whether the start-up has ended (well or not) within `timeout` seconds."""
        return self._ready.wait(timeout)

    @property
    def running(self) -> bool:
        """Whether Spark has started (and did not fail to)."""
        return self._ready.is_set() and self.error is None and self.session is not None

    @property
    def starting(self) -> bool:
        return self._thread is not None and not self._ready.is_set()

    def check(self) -> None:
        """Raise the start-up's failure, and let the next statement try again."""
        if self.error is None:
            return
        error, self.error, self._thread = self.error, None, None
        raise ExternalSystemError(f"cannot start spark: {str(error).strip() or type(error).__name__}")
