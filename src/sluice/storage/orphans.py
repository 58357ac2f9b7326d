"""Files of items a data directory's catalog does not name: set aside when it opens,
never deleted, and said so.

An item's files are `secrets/<id>` in the data directory, and `streams/<id>/`,
`sinks/<id>/` and `tables/<id>.jsonl` where its data is (`storage`). Files no item names
are left by a crash between a catalog commit and the files it concerns (a secret's value
is written before the catalog names it), or — all of a later item's — when an older
`catalog.json` is put back. They are moved to `orphaned/<UTC time>/<folder>/` in the data
directory (the secrets) and where the data is, after `DurableCatalog.reserve` has put their
ids out of reach of new items, and each move is named in a notice; then `catalog.json` is
written again, numbering its next item past them, so that the next opening says nothing.

Data under a data URI is looked through only when the catalog is older than its data
directory (`DurableCatalog.written_next_id` below `given_out`): listing it starts Spark.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from sluice.catalog.secrets import DIRECTORY as SECRETS
from sluice.catalog.store import DurableCatalog
from sluice.storage.location import LocalFiles, Location, local

ORPHANED = "orphaned"
DATA_FOLDERS = ("streams", "sinks", "tables")
_ITEM_ID = re.compile(r"u[0-9]+")


def set_aside(data_dir: Path, data: Location, catalog: DurableCatalog) -> list[str]:
    """Move the files no item of `catalog` names aside; the notices saying what happened."""
    notices = []
    older = catalog.written_next_id < catalog.given_out
    if older:
        notices.append(
            f'catalog "{catalog.path}" would number its next item u{catalog.written_next_id}, but '
            f"items up to u{catalog.given_out - 1} were created in this data directory (was an "
            f"older catalog.json put back?): new items are numbered from u{catalog.given_out}"
        )
    named = {item.id for item in catalog.current}
    here = local(data_dir)
    folders = [(here, SECRETS)]
    if older or isinstance(data.files, LocalFiles):
        folders += [(data, folder) for folder in DATA_FOLDERS]
    found = [(root, folder, entry) for root, folder in folders for entry in (root / folder).children("*")]
    found = [(root, folder, entry) for root, folder, entry in found if _owner(entry.name) not in named]
    if found:
        catalog.reserve(max(_number(entry.name) for _, _, entry in found) + 1)
    notices += _moved_aside(found)
    if older or found:  # said once: catalog.json numbers its next item past them from now on
        catalog.commit(catalog.current)
    return notices


def _moved_aside(found: list[tuple[Location, str, Location]]) -> list[str]:
    """Move each `(root, folder, entry)` to `<root>/orphaned/<UTC time>/<folder>/`; the
    notices naming them."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    moved: dict[str, list[str]] = {}
    for root, folder, entry in found:
        target = root / ORPHANED / stamp / folder / entry.name
        target.parent.make_dirs()
        entry.move_to(target)
        moved.setdefault(str(root / ORPHANED / stamp), []).append(f"{folder}/{entry.name}")
    return [
        f'files of items the catalog does not name were moved to "{where}": {", ".join(sorted(names))}'
        for where, names in moved.items()
    ]


def _owner(name: str) -> str | None:
    """The id of the item a file or folder belongs to, by its name (None: no item's)."""
    stem = name.removesuffix(".jsonl")
    return stem if _ITEM_ID.fullmatch(stem) else None


def _number(name: str) -> int:
    owner = _owner(name)
    return int(owner[1:]) if owner else 0
