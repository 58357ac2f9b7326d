"""Ctrl-C while the shell runs something: `Cancelled`, what the shell raises when the user
pressed it; `keep_cancelling`, which cancels a statement's Spark jobs for as long as the
statement runs; and `stream_rows`, which prints a SUBSCRIBE's changes as they arrive until
Ctrl-C closes it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from sluice.session import Session
from sluice.values import value_text


def keep_cancelling(session: Session, group: str, worker: threading.Thread) -> None:
    """Cancel the Spark jobs of job group `group`, and keep cancelling them while `worker`
    still runs (on a thread of its own): a statement interrupted between two jobs (reading
    Kafka offsets, planning) would otherwise start its next one after the cancel, unseen
    and unstoppable."""

    def cancel() -> None:
        while True:
            try:
                session.cancel_job_group(group)
            except Exception:  # a JVM that is going away has no jobs left to cancel
                return
            worker.join(0.5)
            if not worker.is_alive():
                return

    threading.Thread(target=cancel, name="sluice-cancel", daemon=True).start()


class Cancelled(Exception):
    """The user pressed Ctrl-C while a statement ran."""


def stream_rows(subscription: Any, write: Callable[[str], None], poll: float = 0.1) -> None:
    """Print a subscription's header, then each change as it arrives, tab-separated, until
    it ends, fails (`SqlError`, raised here) or Ctrl-C closes it (raises `Cancelled`)."""
    changes: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for row in subscription:
                changes.put(("row", row))
            changes.put(("end", None))
        except BaseException as e:  # handed to the printing thread
            changes.put(("error", e))

    write("\t".join(subscription.columns))
    threading.Thread(target=pump, name="sluice-subscribe", daemon=True).start()
    try:
        while True:
            try:
                kind, item = changes.get(timeout=poll)
            except queue.Empty:
                continue
            if kind == "row":
                write("\t".join(value_text(v) for v in item))
            elif kind == "error":
                raise item
            else:
                return
    except KeyboardInterrupt:
        raise Cancelled from None
    finally:
        subscription.close()
