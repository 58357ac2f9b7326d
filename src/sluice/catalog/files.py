"""Crash-safe replacement of a small file in the data directory.

The new content goes to a temporary file beside the target (created readable by its owner
only), is fsynced, renamed over the target, and the directory is fsynced: a crash leaves
the old file or the new one, never a mix, and the rename survives a power cut. A write
that finds no space left raises ENOSPC's OSError naming the file it was replacing.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    except OSError as e:
        raise _named(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise _named(e, path) from None
        raise
    sync_directory(path.parent)


def _named(error: OSError, path: Path) -> OSError:
    """A full disk's error naming the file being replaced (a write's names none); another
    as it is."""
    if error.errno != errno.ENOSPC:
        return error
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def sync_directory(path: Path) -> None:
    """Make the directory's entries (a rename, a removal), or a file's content, durable."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
