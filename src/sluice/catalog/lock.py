"""One session per data directory: an exclusive lock on `<data dir>/lock`, held from
before the catalog is read until the session closes.

The lock is `flock`, which belongs to the open file, not to the process (as `fcntl`
record locks do): a second session in the same process is refused like one in another
process, and closing one session cannot release a lock another still relies on. The
holder writes its process id into the file, so the refusal can name it. The operating
system drops the lock when the holder exits, however it exits.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from sluice.errors import ExternalSystemError, ObjectInUse

LOCK_FILE = "lock"
# How long a refused session waits for the holder to write its process id, which it does
# just after taking the lock.
_HOLDER_WAIT_SECONDS = 1.0


class DataDirectoryLock:
    def __init__(self, data_dir: Path) -> None:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            # Opened without truncating: a refused session leaves the holder's file as it is.
            self._file = open(data_dir / LOCK_FILE, "a+b")  # noqa: SIM115 - held until release()
        except OSError as e:
            raise ExternalSystemError(f'cannot open data directory "{data_dir}": {e.strerror}') from None
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(self._file)
            self._file.close()
            raise ObjectInUse(
                f'data directory "{data_dir.resolve()}" is in use by process {holder}',
                hint="a data directory is opened by one session at a time: close the other "
                "session or use another data directory",
            ) from None
        self._file.truncate(0)
        self._file.write(f"{os.getpid()}\n".encode())
        self._file.flush()

    def release(self) -> None:
        """Closing the file releases the lock."""
        self._file.close()


def _holder(file) -> str:
    deadline = time.monotonic() + _HOLDER_WAIT_SECONDS
    while True:
        file.seek(0)
        text = file.read().decode("ascii", "replace").strip()
        if text.isdigit() or time.monotonic() > deadline:
            return text if text.isdigit() else "unknown"
        time.sleep(0.01)
