"""Retrying transient faults of a source's external systems — a Kafka broker unreachable
or without a leader, a request timed out, a schema registry timing out, unreachable or
answering 5xx — with exponential backoff up to a bound (Kafka Connect's
`errors.retry.timeout` and `errors.retry.delay.max.ms`, KIP-298; a source's RETRY TIMEOUT
and RETRY DELAY MAX).

`RetryPolicy` is the one backoff policy: the reader's metadata calls and fetches, the
registry look-up of a writer schema and the restarts of a failed ingestion all wait by it.
A fault that outlasts it becomes `SourceUnavailable`, the failure of the read, whose text is
the reason the failed source shows.

That text is a protocol across Spark, written and parsed here, side by side: raised in a
Python data source or a job, `SourceUnavailable` reaches the driver only as the last line of
the traceback Spark quotes, `…SourceUnavailable: source "name": reason` (`__str__`), from
which `reason_of` finds the source and the reason again. The raisers are below Spark
(`kafka/client.py`, `kafka/registry.py`), so both sides stay here; the one reader is
`spark/failures.py`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# The first wait after a failed attempt; each next wait doubles, up to the policy's maximum.
FIRST_DELAY_SECONDS = 0.1
# Bounds of one attempt's own timeout: long enough for a broker's answer, short enough
# that a small RETRY TIMEOUT is not overrun by a single attempt.
ATTEMPT_SECONDS = (1.0, 10.0)


class TransientFault(Exception):
    """An attempt failed in a way that may clear by itself; its text is the reason."""


class SourceUnavailable(BaseException):
    """A source's read failed: a transient fault outlasted the retry bound, or an external
    system answered in a way no retry changes (a registry refusing the source's login).

    A `BaseException`, like `KeyboardInterrupt`, because no message is at fault: it must
    cross every per-message `except Exception` (a decoder turns those into that message's
    decode error) on its way out of the read. Its text is `source "name": reason`, which
    `reason_of` finds again in the text of the Spark failure it causes."""

    def __init__(self, reason: str, source: str = "") -> None:
        super().__init__(reason, source)
        self.reason, self.source = reason, source

    def __str__(self) -> str:
        if not self.source:
            return self.reason
        return f'source "{self.source.replace(chr(34), chr(34) * 2)}": {self.reason}'


_UNAVAILABLE = re.compile(r'SourceUnavailable: (?:source "((?:[^"]|"")*)": )?(.*)')


def reason_of(text: str) -> tuple[str, str] | None:
    """(source name, reason) of the `SourceUnavailable` a failure's text (a Python
    traceback, possibly wrapped by Spark) ends with, or None if it has none. Read
    through `spark.failures.unavailable`."""
    found = _UNAVAILABLE.findall(text)
    if not found:
        return None
    source, reason = found[-1]
    return source.replace('""', '"'), reason.strip()


@dataclass(frozen=True)
class RetryPolicy:
    """How long a fault may last before the read fails (`timeout`, seconds; 0: at the
    first failure) and the longest wait between two attempts (`delay_max`, seconds).
    `source` names the source in the failure it raises."""

    timeout: float
    delay_max: float
    source: str = ""

    def to_json(self) -> str:
        return json.dumps([self.timeout, self.delay_max, self.source])

    @staticmethod
    def from_json(text: str) -> RetryPolicy:
        timeout, delay_max, source = json.loads(text)
        return RetryPolicy(timeout, delay_max, source)

    def delays(self) -> Iterator[float]:
        """The waits between attempts: doubling from `FIRST_DELAY_SECONDS`, capped."""
        delay = FIRST_DELAY_SECONDS
        while True:
            yield min(delay, self.delay_max)
            delay *= 2

    def call(self, attempt: Callable[[float], T], what: str = "") -> T:
        """`attempt(seconds)`'s result, where `seconds` bounds the attempt's own wait. While
        it raises `TransientFault` it is tried again after each delay, until the fault
        has lasted `timeout`: then `SourceUnavailable` giving the last reason (after
        `what: `, when the reason does not say what failed)."""
        began = time.monotonic()
        delays = self.delays()
        while True:
            left = self.timeout - (time.monotonic() - began)
            try:
                return attempt(min(max(left, ATTEMPT_SECONDS[0]), ATTEMPT_SECONDS[1]))
            except TransientFault as fault:
                left = self.timeout - (time.monotonic() - began)
                if left <= 0:
                    raise self.exhausted(f"{what}: {fault}" if what else str(fault)) from None
                time.sleep(min(next(delays), left))

    def exhausted(self, reason: str) -> SourceUnavailable:
        """The failure of a read whose fault, `reason`, outlasted the policy."""
        if self.timeout > 0:
            reason += f" (still failing after retrying for {self.timeout:g}s)"
        return SourceUnavailable(reason, self.source)

    def client_config(self) -> dict[str, int]:
        """librdkafka's own reconnection backoff, set to this policy's."""
        first = int(FIRST_DELAY_SECONDS * 1000)
        return {
            "reconnect.backoff.ms": first,
            "reconnect.backoff.max.ms": max(first, int(self.delay_max * 1000)),
        }
