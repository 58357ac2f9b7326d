"""What sluice's Spark session is built with, chosen before it starts (without importing
pyspark): `--conf key=value` pairs and a `SLUICE_SPARK_CONF` file in spark-defaults.conf
form, whether Spark's web UI runs, and where Spark's log goes — under the data directory,
or in a temporary directory removed when the process exits."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from sluice.errors import InvalidParameterValue

CONF_FILE_VARIABLE = "SLUICE_SPARK_CONF"
LOG_NAME = "spark.log"


@dataclass(frozen=True)
class SparkSettings:
    conf: tuple[tuple[str, str], ...] = ()  # in order: a later pair wins
    ui: bool = False
    log_dir: Path | None = None  # None: a temporary directory, removed at exit


_lock = threading.Lock()
_wanted = SparkSettings()
_temporary_log_dir: Path | None = None
_log_in_use: Path | None = None  # the running Spark session's log
_starting = threading.Event()  # set while the Spark session is being built


def configure(settings: SparkSettings) -> None:
    """The settings the Spark session is built with when it starts (no effect once it has)."""
    global _wanted
    with _lock:
        _wanted = settings


def wanted() -> SparkSettings:
    return _wanted


def begin_start() -> None:
    _starting.set()


def started(log: Path | None) -> None:
    """Record that the Spark session started, writing its log to `log` (None: it did
    not start)."""
    global _log_in_use
    _log_in_use = log
    _starting.clear()


def starting() -> bool:
    """Whether the process's Spark session is being started now."""
    return _starting.is_set()


def running() -> bool:
    """Whether the process's Spark session has started."""
    return _log_in_use is not None


def current_log() -> Path:
    """The running Spark session's log, or where the next one's will go."""
    return _log_in_use if _log_in_use is not None else log_path(_wanted)


def conf_pairs(settings: SparkSettings) -> list[tuple[str, str]]:
    """The `SLUICE_SPARK_CONF` file's pairs, then the settings' own (which win)."""
    path = os.environ.get(CONF_FILE_VARIABLE)
    return (read_conf_file(Path(path)) if path else []) + list(settings.conf)


def read_conf_file(path: Path) -> list[tuple[str, str]]:
    """`key value` lines (or `key=value`, `key: value`), `#` and `!` comments, as Spark
    reads spark-defaults.conf."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidParameterValue(
            f'cannot read {CONF_FILE_VARIABLE} file "{path}": {e.strerror or e}'
        ) from None
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        pair = parse_pair(stripped)
        if pair is None:
            raise InvalidParameterValue(
                f'invalid line {number} in {CONF_FILE_VARIABLE} file "{path}": {stripped}',
                hint="write one setting a line: spark.some.key value",
            )
        pairs.append(pair)
    return pairs


def parse_pair(text: str) -> tuple[str, str] | None:
    """`key value`, `key=value` or `key: value` as (key, value); None without a value."""
    cut = min((i for i in (text.find("="), text.find(":"), _first_space(text)) if i > 0), default=-1)
    if cut < 0:
        return None
    key, value = text[:cut].strip(), text[cut + 1:].strip()
    return (key, value) if key and value else None


def _first_space(text: str) -> int:
    return next((i for i, c in enumerate(text) if c.isspace()), -1)


def log_path(settings: SparkSettings) -> Path:
    """The file Spark's JVM (and its Python workers) write their stderr to."""
    global _temporary_log_dir
    if settings.log_dir is not None:
        settings.log_dir.mkdir(parents=True, exist_ok=True)
        return settings.log_dir / LOG_NAME
    with _lock:
        if _temporary_log_dir is None:
            _temporary_log_dir = Path(tempfile.mkdtemp(prefix="sluice-spark-log-"))
            atexit.register(shutil.rmtree, _temporary_log_dir, True)
    return _temporary_log_dir / LOG_NAME

