"""A store's commit records (`store`): the kinds of files a commit holds, what a record
says (its files, where it ends, the counters), how records are numbered, the entries of
the files Spark wrote once they are sealed (fsynced, sized, counted, checksummed), and what
a check finds wrong (`Damage`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sluice.errors import SOURCE_ERROR, StoreDamaged
from sluice.storage.location import Location

KINDS = ("oks", "errs", "retract", "dlq", "log", "skip", "seen", "state")
FILE_FIELDS = {"path", "kind", "bytes", "rows", "crc32"}
Offsets = dict[int, int]  # partition → next offset
Ranges = dict[int, tuple[int, int]]  # partition → [from, to)


@dataclass(frozen=True)
class Totals:
    """A source's counters since ingestion began."""

    messages: int = 0
    errors: int = 0
    dead_lettered: int = 0
    last_error_ms: int | None = None


@dataclass(frozen=True)
class Damage:
    """The first thing found wrong with a store, in words naming the commit or file."""

    what: str

    def error(self, source: str, **more) -> StoreDamaged:
        message = f'{SOURCE_ERROR}the stored data of source "{source}" is damaged: {self.what}'
        return StoreDamaged(message, **more)


@dataclass(frozen=True)
class Inspection:
    records: list[dict]  # the sound commits, in order
    damage: Damage | None  # what is wrong with the commit after them

    @property
    def end(self) -> Offsets:
        return ends(self.records[-1]) if self.records else {}


def ends(record: dict) -> Offsets:
    """Where a commit ends: `{partition: next offset}`."""
    return {int(p): to for p, (_, to) in record["offsets"].items()}


def files_of(records: list[dict], kind: str) -> Iterator[dict]:
    """The files of one kind the commit records list, in order."""
    return (f for r in records for f in r["files"] if f["kind"] == kind)


def read_past(done: Offsets | None, committed: Offsets) -> Damage | None:
    """A checkpoint that has read past the committed offsets: what lies between was lost."""
    past = ahead(done, committed)
    if not past:
        return None
    return Damage(
        "its checkpoint has read past its last commit ("
        + ", ".join(f"partition {p}: offset {at}, committed {c}" for p, (at, c) in sorted(past.items()))
        + ")"
    )


def ahead(position: Offsets | None, committed: Offsets) -> dict[int, tuple[int, int]]:
    """The partitions where a checkpoint's position is past the committed offsets."""
    return {
        p: (at, committed.get(p, 0)) for p, at in (position or {}).items() if at > committed.get(p, 0)
    }


def numbered_records(folder: Location) -> list[int]:
    """The numbers `k` of the records `<k>.json` in `folder`, ascending."""
    names = (p.name.removesuffix(".json") for p in folder.children("*.json"))
    return sorted(int(name) for name in names if name.isdigit())


def last_number(folder: Location) -> int | None:
    return max((int(p.name) for p in folder.children() if p.name.isdigit()), default=None)


def seal(directory: Location, prefix: str) -> list[dict]:
    """Each Parquet file Spark wrote under `directory`, fsynced with its folders, as a
    record lists it: its path once published under `prefix`, bytes, rows and CRC-32."""
    files = []
    for folder in directory.children("__out=*"):
        for path in folder.children("*.parquet"):
            files.append(
                {
                    "path": f"{prefix}/{folder.name}/{path.name}",
                    "kind": folder.name.removeprefix("__out="),
                    "bytes": path.stat()[0],
                    "rows": path.parquet_rows(),
                    "crc32": path.crc32(sync=True),
                }
            )
        folder.sync()
    directory.sync()
    return files
