"""Why a Spark job or stream failed, in words a user can act on, and which failures are
transient enough to run again: the one reader of the text a Python exception leaves
when it crosses Spark.

The protocol: sluice's Python code that Spark runs — the `sluice_kafka` data source, a
`foreachBatch` function, a job's commit — raises an exception, and Spark wraps it in
layers of its own (a `StreamingQueryException` whose `getMessage()` is empty, a task
failure quoting the Python traceback inside Java's), so only text reaches the driver:
the traceback's last line, `module.ErrorName: message`. Its writers are the exceptions'
own texts, written for users (`SqlError`s, `KafkaReadError`, `OffsetsRegressed`), and
`SourceUnavailable`'s `source "name": reason`, whose parser `kafka.retry.reason_of` sits
beside it below Spark (its raisers are in `kafka/`); PostgreSQL's, Python's and Java's
disk-full texts are read by `errors.disk_full_in`, beside `DiskFull`. Spark's own error
conditions are read in `conditions`, a query's guard's `raise_error` in `guards`.

The reason (`failure_reason`) is found in that text: the `SourceUnavailable` a read raised
(its own words: `unavailable`), else Spark failing to start a Python worker in time
(Spark's text, `worker_late`: sluice's `WORKER_LATE`), else a write that found no space
left (PostgreSQL's disk-full text, naming the file or else the folder written), else the
last Python exception of the last traceback (`raised`; sluice's own by its text alone,
another by its name and text), else the first line of Spark's message without its
condition — never nothing. `raised_as` tells a given sluice exception by its name
(`OffsetsRegressed` fails a stream for good).

A Python worker Spark starts as a process of its own (a streaming query's Python source,
`pyspark.sql.streaming.python_streaming_source_runner`) must connect back to the JVM
within 10 s, a limit fixed in Spark's `PythonWorkerFactory`; it starts in ~2 s on an idle
machine of two cores (importing pyspark and the reader), and a loaded machine misses the
limit. That failure is transient: `retried` runs a job again that meets it, a failed
stream is restarted by its supervisor, and a statement waits for the restarted stream
(`ingest.Ingestion.failed`) — each within the source's RETRY TIMEOUT, past which the
failure shows in `WORKER_LATE`'s words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from sluice.errors import disk_full_in
from sluice.kafka.retry import RetryPolicy, TransientFault, reason_of
from sluice.spark.conditions import without_condition

T = TypeVar("T")

_TRACEBACK = "Traceback (most recent call last):"
# The line a Python traceback ends with: `module.ErrorName: message`, unindented.
_PYTHON_ERROR = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*)): (\S.*)$", re.M)
# Spark's texts (4.x, `PythonWorkerFactory.createSimpleWorker`) for a Python worker that
# did not connect back within its 10 s.
_WORKER_LATE_TEXTS = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)
WORKER_LATE = (
    "Spark could not start a Python worker: it did not connect back within Spark's fixed "
    "10 s limit, which a loaded machine exceeds; lighten the machine's load or give Spark "
    "more cores"
)


def worker_late(error: BaseException | str) -> bool:
    """Whether a Spark failure is a Python worker that did not start in time."""
    text = str(error)
    return any(late in text for late in _WORKER_LATE_TEXTS)


def failure_reason(error: BaseException, where: str) -> str:
    """Why `error` failed the writing of the folder `where` (a source's store, a sink's state)."""
    text = str(error)
    read = unavailable(error)
    if read is not None:
        return read[1]
    if worker_late(text):
        return WORKER_LATE
    disk_full = disk_full_in(text, where)
    if disk_full is not None:
        return disk_full
    found = raised(error)
    if found is not None:
        qualified, message = found
        return message if qualified.startswith("sluice.") else f"{qualified.rsplit('.', 1)[-1]}: {message}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return without_condition(first) or type(error).__name__


def unavailable(error: BaseException) -> tuple[str, str] | None:
    """(source name, reason) of the `SourceUnavailable` that failed a read, if the failure
    quotes one."""
    return reason_of(str(error))


def raised(error: BaseException) -> tuple[str, str] | None:
    """The Python exception the failure quotes last (its qualified name and its text), if any."""
    text = str(error)
    if _TRACEBACK not in text:
        return None
    found = _PYTHON_ERROR.search(text.rsplit(_TRACEBACK, 1)[1])
    if found is None:
        return None
    qualified, _, message = found.groups()
    return qualified, message.strip()


def raised_as(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether the failure quotes `kind` (a sluice exception) as the Python exception raised."""
    found = raised(error)
    return found is not None and found[0] == f"{kind.__module__}.{kind.__qualname__}"


def retried(run: Callable[[], T], policy: RetryPolicy) -> T:
    """`run()`'s result, run again with `policy`'s backoff while Spark fails to start a
    Python worker for it, until that has lasted the policy's timeout: then the
    `SourceUnavailable` of `policy.exhausted` giving `WORKER_LATE`. Any other failure is
    raised at once. `run` must be safe to run again after a failure (a read, a commit
    through staging)."""

    def attempt(_seconds: float) -> T:
        try:
            return run()
        except (PySparkException, Py4JJavaError) as e:
            if worker_late(e):
                raise TransientFault(WORKER_LATE) from None
            raise

    return policy.call(attempt)
