"""What reads of continuously ingested sources' stores remember across statements, for one
session (its `Controller` owns one; a `Store` made without one gets its own): commit
records read and files checked, valid while a file's stat is unchanged, so a SELECT
hashes only what changed since the last one; the frames of the last reads of stores'
commits, so a SELECT over commits read before builds none; and the reads in progress per
store, which a compaction's clean-up waits out. Whatever names a file compaction or a DROP
removes is forgotten with it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

# How many stores' read frames are kept (the least recently used go first).
COLLECTIONS_KEPT = 32


class StoreCaches:
    def __init__(self) -> None:
        self.records: dict[str, tuple[tuple, dict]] = {}  # record path: (its stat, the record)
        self.checked: dict[str, tuple] = {}  # file path: its stat when its checksum matched
        # (session, source, store root, files read): the frames of that read.
        self._collections: OrderedDict[tuple, Any] = OrderedDict()
        self._readers: dict[str, int] = {}  # store root: reads in progress
        self._lock = threading.Lock()

    def collection(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The frames of the read `key` names, made by `make` if not kept."""
        with self._lock:
            found = self._collections.get(key)
            if found is not None:
                self._collections.move_to_end(key)
                return found
        made = make()
        with self._lock:
            self._collections[key] = made
            while len(self._collections) > COLLECTIONS_KEPT:
                self._collections.popitem(last=False)
        return made

    def begin_read(self, root: str, reads: int = 1) -> None:
        with self._lock:
            self._readers[root] = self._readers.get(root, 0) + reads

    def end_read(self, root: str, reads: int) -> None:
        self.begin_read(root, -reads)

    def remove_unread(self, root: str, remove: Callable[[], Iterable[str]]) -> bool:
        """Run `remove` (which removes files of the store `root` and names them) if no read
        is using the store, no read beginning meanwhile; whether it ran."""
        with self._lock:
            if self._readers.get(root, 0):
                return False
            removed = list(remove())
        self.forget_paths(root, removed)
        return True

    def forget(self, root: object) -> None:
        """Forget everything of the store whose folder is `root` (dropped)."""
        self.forget_paths(str(root), [str(root)])

    def forget_paths(self, root: str, paths: Iterable[str]) -> None:
        """Forget the records and checks of `paths` (files or folders) and the store's
        read frames, which may list them."""
        prefixes = tuple(paths)
        if not prefixes:
            return
        under = tuple(p.rstrip("/") + "/" for p in prefixes)
        with self._lock:
            for table in (self.records, self.checked):
                for path in [p for p in table if p in prefixes or p.startswith(under)]:
                    del table[path]
            for key in [k for k in self._collections if k[2] == root]:
                del self._collections[key]
