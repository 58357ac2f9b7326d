"""The one Spark session sluice uses: started lazily, only when data is needed.

Local by default (`local[2]`); `SLUICE_SPARK_MASTER` points it elsewhere. Spark's own
logging and console progress bars are kept out of user output (its log is a file, see
`settings`), Python workers run the interpreter sluice runs in (so they import sluice),
and timestamps are UTC. A Ctrl-C in the middle of a call into the JVM is the caller's to
report: py4j's logged traceback of it is dropped. The user's settings (`settings.wanted()`: `--conf`, the
`SLUICE_SPARK_CONF` file, the web UI) come last, so they win.

A local session listens on loopback only (`_loopback`): its driver, block manager and web
UI have no authentication, and the reader options of its tasks may carry credentials. A
cluster master (`SLUICE_SPARK_MASTER`, `--master`), Spark Connect (`SPARK_REMOTE`), or
the user's own choice (`spark.driver.bindAddress`, `spark.driver.host`, `SPARK_LOCAL_IP`)
leaves Spark's addresses as they say.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from py4j.java_gateway import JVMView
from py4j.protocol import Py4JError
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from sluice.errors import InternalError
from sluice.spark.kafka_source import KafkaDataSource
from sluice.spark.settings import (
    SparkSettings,
    begin_start,
    conf_pairs,
    current_log,
    log_path,
    started,
    wanted,
)

DEFAULT_MASTER = "local[2]"
LOOPBACK = "127.0.0.1"
# The settings that choose where the driver listens; a user who sets one chooses for it all.
_ADDRESS_SETTINGS = ("spark.driver.bindAddress", "spark.driver.host")
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
_lock = threading.Lock()
_session: SparkSession | None = None
_this_thread = threading.local()


def spark() -> SparkSession:
    global _session
    with _lock:
        if _session is None:
            logging.getLogger().addFilter(_no_py4j_interrupt)
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            settings = wanted()
            master = os.environ.get("SLUICE_SPARK_MASTER", DEFAULT_MASTER)
            loopback = _loopback(master, settings)
            if loopback:
                # Read by the JVM at launch: the web UI binds where it says (else every
                # interface), and the driver's own address defaults to it.
                os.environ["SPARK_LOCAL_IP"] = LOOPBACK
            log = log_path(settings)
            begin_start()
            try:
                with _stderr_to(log):
                    session = _build(master, settings, loopback)
            except BaseException:
                started(None)
                raise
            started(log)
            session.sparkContext.setLogLevel("ERROR")
            _quiet_query_context_loggers()
            session.dataSource.register(KafkaDataSource)
            _session = session
        session = _session
    activate(session)
    return session


def activate(session: SparkSession) -> None:
    """Make `session` the calling thread's active session in the JVM. Some of Spark's
    checks read settings through it, and only the thread that built the session has it:
    from any other they would see Spark's defaults (a stream over a TIME column refused as
    if `spark.sql.timeType.enabled` were off). `spark()` does this for its caller; code
    handed the session instead calls it before what needs it (`Ingestion.start`, on
    whichever thread starts or restarts a stream). A Spark Connect session (`SPARK_REMOTE`)
    has no JVM here, and its server keeps the settings."""
    if not getattr(_this_thread, "active", False):
        if hasattr(session, "_jsparkSession"):
            jvm(session).SparkSession.setActiveSession(session._jsparkSession)
        _this_thread.active = True


def jvm(session: SparkSession) -> JVMView:
    """The JVM of a session that has one (not Spark Connect's). PySpark types it optional
    for Connect; a session with a JVM is built with it (`SparkSession.__init__` asserts so)."""
    view = session._jvm
    if view is None:
        raise InternalError.bug("a classic Spark session without its JVM")
    return view


def task_progress(group: str | None) -> tuple[int, int] | None:
    """(tasks done, tasks) of the active stages of the running Spark session — of the jobs
    in job group `group` when given — or None when it runs none (or has no status
    tracker here: a Spark Connect session, or the calling thread's connection to the JVM
    was broken by a Ctrl-C in a call: py4j opens another at the next)."""
    if _session is None or not hasattr(_session, "_jsparkSession"):
        return None
    tracker = _session.sparkContext.statusTracker()
    try:
        if group is None:
            stages = tracker.getActiveStageIds()
        else:
            jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(group)]
            stages = [s for job in jobs if job is not None and job.status == "RUNNING" for s in job.stageIds]
        infos = [tracker.getStageInfo(stage) for stage in stages]
    except (Py4JError, OSError):
        # The calling thread's connection, broken by a Ctrl-C in a call (py4j, closing it,
        # may fail with OSError "Transport endpoint is not connected"): no count this time.
        return None
    done = sum(info.numCompletedTasks for info in infos if info is not None)
    total = sum(info.numTasks for info in infos if info is not None)
    return (done, total) if total else None


def _no_py4j_interrupt(record: logging.LogRecord) -> bool:
    """Whether a root-logger record is to be shown: not py4j's traceback of a Ctrl-C that
    interrupted a call into the JVM (it logs one, then lets the KeyboardInterrupt go on,
    which the front end reports as a cancel)."""
    return record.getMessage() != "KeyboardInterrupt while sending command."


def join_job_group(group: str, description: str) -> None:
    """Put the jobs the calling thread starts from now on into job group `group`, which
    `cancel_job_group` interrupts (a Spark Connect session, with no context here, has none)."""
    if _session is not None and hasattr(_session, "_jsparkSession"):
        _session.sparkContext.setJobGroup(group, description[:200], interruptOnCancel=True)


def cancel_job_group(group: str) -> None:
    if _session is not None and hasattr(_session, "_jsparkSession"):
        _session.sparkContext.cancelJobGroup(group)


def _quiet_query_context_loggers() -> None:
    """PySpark logs every failed query as a JSON line on stderr; sluice reports (or
    translates) those errors itself, so the user sees each once, in its own words."""
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


def spark_log_path() -> Path:
    """Where the JVM (and the Python workers it starts) write their own stderr: the
    running session's log, or where the next one's will go."""
    return current_log()


def ui_url() -> str | None:
    """The address of the running session's web UI, if it has one."""
    if _session is None or not hasattr(_session, "sparkContext"):
        return None
    return _session.sparkContext.uiWebUrl


@contextmanager
def _stderr_to(path: Path):
    """Start child processes with stderr going to `path`: the JVM inherits it at launch,
    so its start-up chatter and later warnings stay out of the user's terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cores(master: str) -> int | None:
    """The cores a master runs tasks on, when its URL says: N of `local[N]` (`local[*]`:
    the machine's), workers × cores of `local-cluster[workers,cores,memory]`; None for a
    cluster, whose executors the URL does not name."""
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if found is not None:
        cores = found.group(1)
        if cores is None:
            return 1
        return (os.cpu_count() or 1) if cores == "*" else int(cores)
    found = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    return int(found.group(1)) * int(found.group(2)) if found is not None else None


def _loopback(master: str, settings: SparkSettings) -> bool:
    """Whether the session is to listen on loopback only: a local master (`local…`,
    `local-cluster[…]`: every JVM on this machine), no Spark Connect, and no address the
    user chose (SPARK_LOCAL_IP at loopback is no other choice: a child process of a sluice
    that started Spark inherits the one it set)."""
    local = master == "local" or master.startswith(("local[", "local-cluster["))
    chosen = os.environ.get("SPARK_LOCAL_IP", LOOPBACK) != LOOPBACK or any(
        k in _ADDRESS_SETTINGS for k, _ in conf_pairs(settings)
    )
    return local and not chosen and "SPARK_REMOTE" not in os.environ


def _build(master: str, settings: SparkSettings, loopback: bool) -> SparkSession:
    builder = (
        SparkSession.builder.master(master)
        .appName("sluice")
        .config("spark.ui.enabled", str(settings.ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # A JSON object repeating a key keeps its last value, as PostgreSQL's jsonb does;
        # Spark's `parse_json` would otherwise fail the whole task on one message.
        .config("spark.sql.variant.allowDuplicateKeys", "true")
        # Avro time-millis/time-micros columns are TIME: without the flag Spark reads them
        # from Arrow but refuses to store them (a continuously ingested source fails).
        .config("spark.sql.timeType.enabled", "true")
        # One shuffle partition per core the master names: every shuffle partition of an
        # upsert source's micro-batch (its reduction to the latest message per key) is a
        # task, so more only adds latency. A cluster keeps Spark's 200 unless `--conf` says
        # otherwise.
        .config("spark.sql.shuffle.partitions", str(_cores(master) or 200))
        # Every broadcast side of a join takes at least one page; the default page (a
        # sixteenth of a core's memory share, 16 MB here) makes a many-way join of small
        # tables thrash or run out of memory (56 ten-row tables: 0.9 GB).
        .config("spark.buffer.pageSize", "1m")
        # A commit's files are written a folder per kind (`render/ingest.write_batch`): with
        # a writer open per kind, Spark writes them as they come instead of sorting every
        # row of the micro-batch by its kind first.
        .config("spark.sql.maxConcurrentOutputFileWriters", "16")
        # Jobs share the cores fairly between pools: a source's compaction runs in a pool
        # of its own (render/compaction.py), so ingestion and queries keep their share.
        .config("spark.scheduler.mode", "FAIR")
        # How long an idle stream sleeps before it asks its source for new offsets again
        # (its trigger runs the next micro-batch at once: `render/ingest.TRIGGER` says why).
        .config("spark.sql.streaming.pollingDelay", "100ms")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={_LOG_CONFIG}")
        # PySpark would record the Python call site of every column function in the JVM
        # (three calls into it each, and a walk of the stack): sluice's own frames, which
        # mean nothing to a user, since sluice names the SQL a failure comes from itself.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    if loopback:
        builder = builder.config("spark.driver.bindAddress", LOOPBACK).config("spark.driver.host", LOOPBACK)
    for key, value in conf_pairs(settings):
        builder = builder.config(key, value)
    return builder.getOrCreate()
