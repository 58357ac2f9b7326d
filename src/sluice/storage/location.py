"""Where a session's data lives — the stream stores with Spark's checkpoints, the sinks'
states and progress, the tables — and the one way sluice reads and writes it: a
`Location` on a filesystem.

By default the data is in the session's data directory, read and written with Python's
os calls (fsync included): executors on other machines see it only where they mount that
directory at the same path. With a data URI (`Session(data_uri=…)`, `$SLUICE_DATA_URI`,
`sluice run --data-uri`) it is under `<data URI>/<id>/`, `<id>` fixed when the data
directory first opens (`data_location`), read and written through Hadoop's FileSystem API
in the Spark session's JVM: every scheme the cluster's Hadoop configuration reaches
(`hdfs://`, `s3a://` with its jars, `file://` on a mount every machine shares), the same
files for the driver and for the executors, which Spark writes and reads under the same
URIs. The catalog, its secrets and its lock stay in the data directory, on the driver.

A `Location` is a path under one `Files`, the filesystem's few operations: names in a
folder, stat, whole-file read, crash-safe replacement of a small file, rename, recursive
removal, and the two a store needs of a Parquet file it publishes (CRC-32, rows). Hadoop
has no directory fsync: its renames are durable when they return (HDFS), so `sync` is
Python's alone. A Hadoop rename is atomic on HDFS and local files, not on object stores
(S3A copies): there a crash mid-rename can leave a folder half moved, which the store's
checks find as damage and repair from Kafka as any other.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from sluice.catalog.files import replace_file, sync_directory
from sluice.errors import NO_SPACE, DataLocationMismatch

DATA_URI_VARIABLE = "SLUICE_DATA_URI"
# In a data directory that keeps its data under a URI: the URI, with its `<id>`.
LOCATION_FILE = "data-location"


class Files(Protocol):
    """One filesystem's operations on paths (strings as `Location.path` holds them)."""

    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...
    def names(self, path: str) -> list[str]: ...
    def make_dirs(self, path: str) -> None: ...
    def read(self, path: str) -> bytes: ...
    def replace(self, path: str, data: bytes) -> None: ...
    def stat(self, path: str) -> tuple[int, tuple]: ...
    def move(self, source: str, target: str) -> None: ...
    def remove(self, path: str) -> None: ...
    def sync(self, path: str) -> None: ...
    def crc32(self, path: str, sync: bool) -> int: ...
    def parquet_rows(self, path: str) -> int: ...
    def read_parquet(self, path: str, columns: list[str]) -> Any: ...


@dataclass(frozen=True)
class Location:
    """A file or folder on `files`, by its path there."""

    files: Files
    path: str

    def __truediv__(self, name: str) -> Location:
        return Location(self.files, f"{self.path.rstrip('/')}/{name}")

    def __str__(self) -> str:
        return self.path

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return Location(self.files, self.path.rstrip("/").rsplit("/", 1)[0])

    @property
    def uri(self) -> str:
        """The path as Spark's readers, writers and checkpoints take it: a local path or
        a URI, as Hadoop's filesystems read it."""
        return self.path

    def exists(self) -> bool:
        return self.files.exists(self.path)

    def is_dir(self) -> bool:
        return self.files.is_dir(self.path)

    def children(self, pattern: str = "*") -> list[Location]:
        """What the folder holds whose name matches `pattern` (none if it is missing), by name."""
        return [self / name for name in sorted(self.files.names(self.path)) if fnmatch(name, pattern)]

    def make_dirs(self) -> None:
        self.files.make_dirs(self.path)

    def read_bytes(self) -> bytes:
        """Raises FileNotFoundError when the file is missing, OSError when unreadable."""
        return self.files.read(self.path)

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def replace(self, data: bytes) -> None:
        """Write the file crash-safely: a reader sees the old content or the new, never a mix."""
        self.files.replace(self.path, data)

    def stat(self) -> tuple[int, tuple]:
        """The file's size and a key that changes whenever the file does (FileNotFoundError
        when it is missing)."""
        return self.files.stat(self.path)

    def version(self) -> tuple | None:
        """The file's stat key, None when it is missing."""
        try:
            return self.stat()[1]
        except FileNotFoundError:
            return None

    def move_to(self, target: Location) -> None:
        """Rename this file or folder to `target`, which must not exist."""
        self.files.move(self.path, target.path)

    def remove(self) -> None:
        """Remove the file, or the folder with what it holds, if it exists."""
        self.files.remove(self.path)

    def sync(self) -> None:
        """Make the file's content, or the folder's entries (a rename, a removal), durable."""
        self.files.sync(self.path)

    def crc32(self, sync: bool = False) -> int:
        """The file's CRC-32; with `sync`, its content made durable too."""
        return self.files.crc32(self.path, sync)

    def parquet_rows(self) -> int:
        """The rows of a Parquet file, from its footer."""
        return self.files.parquet_rows(self.path)

    def read_parquet(self, columns: list[str]) -> Any:
        """Those columns of a Parquet file as an Arrow table (reading only them from the
        driver's own filesystem)."""
        return self.files.read_parquet(self.path, columns)

    def temporary(self, prefix: str) -> Location:
        """A new empty folder in this one, named `prefix` and a unique suffix."""
        folder = self / f"{prefix}{uuid.uuid4().hex[:12]}"
        folder.make_dirs()
        return folder


def local(path: str | Path) -> Location:
    """`path` on the driver's own filesystem."""
    return Location(LocalFiles(), str(path))


def disk(location: Location) -> Path:
    """The driver's path of a location on its own filesystem (for tools and tests that
    handle the files directly)."""
    if not isinstance(location.files, LocalFiles):
        raise ValueError(f'"{location}" is not on the driver\'s filesystem')
    return Path(location.path)


def remove_all(locations: list[Location]) -> None:
    for location in locations:
        location.remove()


@dataclass(frozen=True)
class LocalFiles:
    """The driver's own filesystem through Python's os calls (one, however many objects)."""

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def names(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def make_dirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def replace(self, path: str, data: bytes) -> None:
        replace_file(Path(path), data)

    def stat(self, path: str) -> tuple[int, tuple]:
        stat = os.stat(path)
        return stat.st_size, (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def move(self, source: str, target: str) -> None:
        os.replace(source, target)

    def remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

    def sync(self, path: str) -> None:
        sync_directory(Path(path))

    def crc32(self, path: str, sync: bool) -> int:
        crc = 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
            if sync:
                os.fsync(f.fileno())
        return crc

    def parquet_rows(self, path: str) -> int:
        import pyarrow.parquet as pq  # imported once data is read, not with the session

        return pq.ParquetFile(path).metadata.num_rows

    def read_parquet(self, path: str, columns: list[str]) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=columns)


class HadoopFiles:
    """Any filesystem Hadoop's configuration reaches, through the Spark session's JVM
    (`spark()` gives the session; it starts on first use). Paths are URIs. A checksummed
    filesystem (Hadoop's local one) is used through its raw one: no `.crc` files beside
    ours."""

    def __init__(self, spark: Callable[[], Any]) -> None:
        self._spark = spark
        self._jvm: Any = None
        self._conf: Any = None
        self._gateway: Any = None
        self._filesystems: dict[tuple[str, str], Any] = {}

    def _open(self) -> Any:
        if self._jvm is None:
            session = self._spark()
            self._conf = session._jsc.hadoopConfiguration()
            self._gateway = session.sparkContext._gateway
            self._jvm = session._jvm
        return self._jvm

    def _at(self, path: str) -> tuple[Any, Any]:
        """The filesystem holding `path`, and `path` as a Hadoop path."""
        jvm = self._open()
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        parts = urlsplit(path)
        key = (parts.scheme, parts.netloc)
        fs = self._filesystems.get(key)
        if fs is None:
            fs = hadoop_path.getFileSystem(self._conf)
            checksummed = jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem")
            if checksummed.isInstance(fs):  # the `.crc` files beside ours are its
                fs = fs.getRawFileSystem()
            self._filesystems[key] = fs
        return fs, hadoop_path

    def _call(self, path: str, action: Callable[[Any, Any], Any]) -> Any:
        """`action(filesystem, hadoop path)`, Java's I/O exceptions raised as Python's."""
        from py4j.protocol import Py4JJavaError

        fs, hadoop_path = self._at(path)
        try:
            return action(fs, hadoop_path)
        except Py4JJavaError as e:
            kind = e.java_exception.getClass().getName()
            message = e.java_exception.getMessage() or kind
            if NO_SPACE in str(e):  # as Python's own: ENOSPC, naming the path
                raise OSError(errno.ENOSPC, NO_SPACE, path) from None
            if kind == "java.io.FileNotFoundException":
                raise FileNotFoundError(message) from None
            if kind.startswith("java.io.") or ".fs." in kind or "IOException" in kind:
                raise OSError(message) from None
            raise

    @property
    def opened(self) -> bool:
        """Whether anything was read or written through this object."""
        return self._jvm is not None

    def exists(self, path: str) -> bool:
        return self._call(path, lambda fs, p: fs.exists(p))

    def is_dir(self, path: str) -> bool:
        try:
            return self._call(path, lambda fs, p: fs.getFileStatus(p).isDirectory())
        except FileNotFoundError:
            return False

    def names(self, path: str) -> list[str]:
        try:
            return self._call(path, lambda fs, p: [s.getPath().getName() for s in fs.listStatus(p)])
        except FileNotFoundError:
            return []

    def make_dirs(self, path: str) -> None:
        self._call(path, lambda fs, p: fs.mkdirs(p))

    def _read(self, fs: Any, p: Any) -> bytes:
        stream = fs.open(p)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read(self, path: str) -> bytes:
        return self._call(path, self._read)

    def replace(self, path: str, data: bytes) -> None:
        folder, name = path.rstrip("/").rsplit("/", 1)
        temporary = f"{folder}/.{name}-{uuid.uuid4().hex[:12]}"
        self.make_dirs(folder)

        def write(fs: Any, p: Any) -> None:
            out = fs.create(p, True)
            try:
                out.write(bytearray(data))
                out.hsync()
            finally:
                out.close()

        def rename(fs: Any, p: Any) -> None:
            jvm = self._jvm
            overwrite = getattr(jvm.org.apache.hadoop.fs, "Options$Rename")
            options = self._gateway.new_array(overwrite, 1)
            options[0] = overwrite.OVERWRITE
            context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(p.toUri(), self._conf)
            context.rename(p, jvm.org.apache.hadoop.fs.Path(path), options)

        self._call(temporary, write)
        try:
            self._call(temporary, rename)
        except BaseException:
            self.remove(temporary)
            raise

    def stat(self, path: str) -> tuple[int, tuple]:
        def stat(fs: Any, p: Any) -> tuple[int, tuple]:
            status = fs.getFileStatus(p)
            size = status.getLen()
            return size, (size, status.getModificationTime())

        return self._call(path, stat)

    def move(self, source: str, target: str) -> None:
        def rename(fs: Any, p: Any) -> None:
            if not fs.rename(p, self._jvm.org.apache.hadoop.fs.Path(target)):
                raise OSError(f'cannot rename "{source}" to "{target}"')

        self._call(source, rename)

    def remove(self, path: str) -> None:
        self._call(path, lambda fs, p: fs.delete(p, True))

    def sync(self, path: str) -> None:
        pass

    def crc32(self, path: str, sync: bool) -> int:
        def checksum(fs: Any, p: Any) -> int:
            jvm = self._jvm
            crc = jvm.java.util.zip.CRC32()
            stream = jvm.java.util.zip.CheckedInputStream(fs.open(p), crc)
            try:
                jvm.org.apache.commons.io.IOUtils.consume(stream)
            finally:
                stream.close()
            return crc.getValue()

        return self._call(path, checksum)

    def parquet_rows(self, path: str) -> int:
        def rows(fs: Any, p: Any) -> int:
            parquet = self._jvm.org.apache.parquet.hadoop
            reader = parquet.ParquetFileReader.open(parquet.util.HadoopInputFile.fromPath(p, self._conf))
            try:
                return reader.getRecordCount()
            finally:
                reader.close()

        return self._call(path, rows)

    def read_parquet(self, path: str, columns: list[str]) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        return pq.read_table(pa.BufferReader(self.read(path)), columns=columns)


def data_location(data_dir: Path, data_uri: str | None, spark: Callable[[], Any]) -> Location:
    """Where the data of the data directory `data_dir` lives: under the data URI it was
    first opened with (recorded in it), or in it. A data URI names a folder many data
    directories may share: each keeps its data in a folder of its own there. Raises
    `DataLocationMismatch` when `data_uri` is not where the directory keeps its data."""
    record = data_dir / LOCATION_FILE
    try:
        recorded = record.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        recorded = None
    if recorded is None and data_uri is not None:
        kept = [name for name in ("streams", "sinks", "tables") if (data_dir / name).exists()]
        if kept:
            raise DataLocationMismatch(
                f'data directory "{data_dir}" keeps its data in itself, not under "{data_uri}"'
            )
        recorded = f"{data_uri.rstrip('/')}/{uuid.uuid4()}"
        replace_file(record, recorded.encode())
    if recorded is None:
        return local(data_dir)
    if data_uri is not None and not recorded.startswith(f"{data_uri.rstrip('/')}/"):
        raise DataLocationMismatch(f'data directory "{data_dir}" keeps its data under "{recorded}", not under "{data_uri}"')
    return Location(HadoopFiles(spark), recorded)


def default_data_uri() -> str | None:
    return os.environ.get(DATA_URI_VARIABLE) or None


def discard_data_uri(data: Location) -> None:
    """Remove a temporary session's data under a data URI, if anything was written there
    (data in the data directory goes with the directory)."""
    files = data.files
    if isinstance(files, HadoopFiles) and files.opened:
        data.remove()
