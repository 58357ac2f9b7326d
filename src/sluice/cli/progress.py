"""The progress line: one line on a terminal, redrawn in place while a wait goes on past a
second (Spark starting, sources catching up with their topics, Spark's tasks), erased when
it ends. Never drawn where output is not a terminal."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

DELAY = 1.0  # seconds a wait goes on before it shows
REDRAW = 0.25  # seconds between two looks at the progress


class ProgressLine:
    def __init__(self, out: TextIO, describe: Callable[[float], str], *, delay: float = DELAY) -> None:
        """`describe(seconds waited)` gives the line's text."""
        self.out = out
        self.describe = describe
        self.enabled = out.isatty()
        self.began = time.monotonic()
        self.delay = delay
        self.drawn = False
        self._next = self.began + delay

    def tick(self) -> None:
        """Redraw the line, if it is time to."""
        now = time.monotonic()
        if not self.enabled or now < self._next:
            return
        self._next = now + REDRAW
        width = shutil.get_terminal_size().columns
        text = self.describe(now - self.began)[: max(width - 1, 0)]
        self.out.write(f"\r{text}\x1b[K")
        self.out.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.drawn = False


def watched(
    work: Callable[[], Any],
    progress: ProgressLine | None = None,
    on_interrupt: Callable[[], None] | None = None,
) -> Any:
    """`work()` run in a worker thread while this (the main) thread redraws `progress`,
    erased when the work ends; so Ctrl-C reaches this thread at once, which calls
    `on_interrupt()` and lets the KeyboardInterrupt go on (the worker's outcome is
    dropped)."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as e:  # handed to the waiting thread
            outcome["error"] = e
        finally:
            done.set()

    worker = threading.Thread(target=run, name="sluice-statement", daemon=True)
    worker.start()
    try:
        while not done.wait(0.1):
            if progress is not None:
                progress.tick()
    except KeyboardInterrupt:
        if on_interrupt is not None:
            on_interrupt()
        raise
    finally:
        if progress is not None:
            progress.clear()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def progress_text(progress, waited: float) -> str:
    """`catching up: orders 120/500 offsets · Spark: 3/8 tasks · 4 s` from a
    `session.Progress` after `waited` seconds."""
    parts = ["starting Spark…"] if progress.spark_starting else []
    if progress.catch_up:
        sources = ", ".join(f"{name} {read}/{target} offsets" for name, read, target in progress.catch_up)
        parts.append(f"catching up: {sources}")
    if progress.tasks is not None:
        done, total = progress.tasks
        parts.append(f"Spark: {done}/{total} tasks")
    parts.append(f"{int(waited)} s")
    return " · ".join(parts if len(parts) > 1 else ["running…", *parts])
