"""Ctrl-C while the shell runs something: `Cancelled`, what the shell raises when the user
pressed it, and `stream_rows`, which prints a SUBSCRIBE's changes as they arrive until
Ctrl-C closes it. A statement's own cancelling is the session's (`Session.cancel`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from sluice.values import value_text


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
