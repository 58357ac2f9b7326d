"""The catalog: an immutable snapshot of items, and its durable home on disk.

Planning reads a `Catalog` snapshot; the session applies a plan by building the next
snapshot (`with_items`, `without`) and handing it to `DurableCatalog.commit`, which writes
it crash-safely (temp file, fsync, atomic rename) before it becomes current. A catalog
file that cannot be read is reported and left exactly as it is. Secret values are not in
the catalog: a snapshot reaches them through the data directory's `SecretStore`.

Item ids are never reused in a data directory, even when an older `catalog.json` is put
back: the next id is also kept outside the catalog, in `next-id`, written before any
catalog, secret or folder uses an id (`reserve`), and the catalog numbers its next item
from the higher of the two.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.catalog import items as kinds
from sluice.catalog.codec import decode, encode
from sluice.catalog.files import replace_file
from sluice.catalog.formats import from_version_1, sink_format_from_version_1
from sluice.catalog.items import Item
from sluice.catalog.types import Column
from sluice.errors import CatalogCorrupt, SqlError

if TYPE_CHECKING:
    from sluice.catalog.secrets import SecretStore

FILE_NAME = "catalog.json"
# The next item id of the data directory ("12" for u12): every id below it was given out.
IDS_FILE = "next-id"
FORMAT = "sluice-catalog"
# 2: formats are the format registry's tagged classes (1: one flat FormatDesc with a
# `kind`, and a sink's formats as SQL text).
VERSION = 2
DAMAGED_HINT = "the file was left untouched; restore it from a backup or move it away"


@dataclass(frozen=True)
class Catalog:
    items: tuple[Item, ...] = ()
    next_id: int = 1
    _by_name: dict[str, Item] = field(default_factory=dict, compare=False, repr=False)
    secrets: SecretStore | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update((item.name, item) for item in self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def get(self, name: str) -> Item | None:
        return self._by_name.get(name)

    def by_id(self, item_id: str) -> Item:
        """The item `item_id`; an id that no item has is a damaged catalog (an item still
        refers to it), reported as such rather than raised as Python's StopIteration."""
        item = next((item for item in self.items if item.id == item_id), None)
        if item is None:
            referrers = [f'{i.kind} "{i.name}"' for i in self.dependents(item_id)]
            raise CatalogCorrupt(
                f"catalog is corrupt: it has no item {item_id}",
                detail=f"{item_id} is referred to by {', '.join(referrers)}" if referrers else None,
                hint="drop what refers to it, or restore the catalog file from a backup",
            )
        return item

    def numbered_from(self, next_id: int) -> Catalog:
        """This catalog, its next item numbered `next_id` or higher."""
        return Catalog(self.items, max(self.next_id, next_id), secrets=self.secrets)

    def allocate_ids(self, count: int) -> list[str]:
        return [f"u{self.next_id + i}" for i in range(count)]

    def with_items(self, added: Iterable[Item]) -> Catalog:
        added = tuple(added)
        ids = [int(item.id[1:]) for item in added]
        return Catalog(self.items + added, max([self.next_id - 1, *ids]) + 1, secrets=self.secrets)

    def without(self, ids: Iterable[str]) -> Catalog:
        gone = set(ids)
        return Catalog(tuple(i for i in self.items if i.id not in gone), self.next_id, secrets=self.secrets)

    def secret_value(self, secret_id: str) -> str:
        """The value of a secret, for something about to connect (planning never asks)."""
        name = self.by_id(secret_id).name
        if self.secrets is None:
            raise CatalogCorrupt(f'secret "{name}" has no value: this catalog has no secret store')
        return self.secrets.read(secret_id, name)

    def dependents(self, item_id: str) -> list[Item]:
        return [item for item in self.items if item_id in item.depends_on]

    def upstream_sources(self, item_ids: Iterable[str], kind: str = kinds.SOURCE) -> list[str]:
        """The sources (or items of another kind) the given relations read, directly or
        through views and dead-letter tables, in first-seen order."""
        found: dict[str, None] = {}
        pending = list(item_ids)
        seen: set[str] = set()
        while pending:
            item = self.by_id(pending.pop(0))
            if item.id in seen:
                continue
            seen.add(item.id)
            if item.kind == kind:
                found[item.id] = None
            pending += item.depends_on
        return list(found)

    def continuous_sources(self) -> set[str]:
        """Sources ingested continuously rather than read as snapshots: those with a
        dead-letter table (its rows are stamped and committed with the source's batch) and
        those a materialized view reads."""
        continuous = {
            item.id
            for item in self.items
            if item.kind == kinds.SOURCE and item.source_desc.dead_letter_table is not None
        }
        views = [item.id for item in self.items if item.kind == kinds.MATERIALIZED_VIEW]
        return continuous | set(self.upstream_sources(views))

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "next_id": self.next_id,
            "items": [encode(item) for item in self.items],
        }

    @staticmethod
    def from_json(data: dict, secrets: SecretStore | None = None) -> Catalog:
        items = tuple(decode(Item, item) for item in data["items"])
        return Catalog(items, int(data["next_id"]), secrets=secrets)


class DurableCatalog:
    """The current catalog of a data directory (with its secrets, when given their store)."""

    def __init__(self, data_dir: Path, secrets: SecretStore | None = None) -> None:
        self.path = data_dir / FILE_NAME
        self.ids_path = data_dir / IDS_FILE
        self.secrets = secrets
        loaded = self._load()
        # The id catalog.json would give next: lower than `given_out` when it is older
        # than items created since (an older copy put back).
        self.written_next_id = loaded.next_id
        self.given_out = self._given_out()
        self.current = loaded.numbered_from(self.given_out)

    def _given_out(self) -> int:
        try:
            text = self.ids_path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return 1  # none given out, or a data directory of an older sluice: the catalog's count
        except (OSError, UnicodeDecodeError) as e:
            raise CatalogCorrupt(f"cannot read {str(self.ids_path)!r}: {e}") from None
        if not text.isdigit():
            raise CatalogCorrupt(
                f"{str(self.ids_path)!r} is corrupt: {text[:40]!r} is not a number",
                hint="the file was left untouched; restore it from a backup",
            )
        return int(text)

    def reserve(self, next_id: int) -> None:
        """Record that every id below `next_id` is given out, before anything uses one;
        the current catalog numbers its next item from there on."""
        if next_id > self.given_out:
            replace_file(self.ids_path, f"{next_id}\n".encode("ascii"))
            self.given_out = next_id
        self.current = self.current.numbered_from(next_id)

    def _load(self) -> Catalog:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Catalog(secrets=self.secrets)
        except OSError as e:
            raise CatalogCorrupt(f"cannot read catalog {str(self.path)!r}: {e.strerror}") from None
        try:
            data = json.loads(raw.decode("utf-8"))
            if data.get("format") != FORMAT:
                raise ValueError("not a sluice catalog")
        except (ValueError, AttributeError, RecursionError) as e:  # UnicodeDecodeError too
            raise CatalogCorrupt(
                f"catalog {str(self.path)!r} is corrupt: {e}",
                hint=DAMAGED_HINT,
            ) from None
        version = data.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise CatalogCorrupt(
                f"catalog {str(self.path)!r} has version {version!r}, "
                f"newer than this sluice understands ({VERSION})",
                hint="use a newer sluice with this data directory",
            )
        try:
            if version < 2:
                data = _from_version_1(data)
            return Catalog.from_json(data, self.secrets)
        except SqlError as e:
            raise CatalogCorrupt(
                f"catalog {str(self.path)!r} was written by an earlier sluice and cannot be read "
                f"with the same meaning: {e.message}",
                hint="the file was left untouched; open it with the sluice that wrote it",
            ) from None
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
            raise CatalogCorrupt(
                f"catalog {str(self.path)!r} is corrupt: {e}",
                hint=DAMAGED_HINT,
            ) from None

    def commit(self, catalog: Catalog) -> None:
        """Make `catalog` current, on disk first: a crash leaves the old or the new file."""
        self.reserve(catalog.next_id)
        text = json.dumps(catalog.to_json(), indent=1, sort_keys=True)
        replace_file(self.path, text.encode("utf-8"))
        self.current = catalog


def _from_version_1(data: dict) -> dict:
    """A version-1 catalog as version 2 stores the same items: its formats in the format
    registry's form. A sink's, stored as SQL text, are made again for its relation's
    columns (a bare FORMAT encoding the KEY columns too); a SqlError when that format could
    not be a sink's."""
    items = data["items"]
    columns = {item["id"]: item.get("columns", []) for item in items}
    upgraded = []
    for item in items:
        details = item.get("details")
        if isinstance(details, dict) and details.get("@") == "SourceDesc":
            details = {**details, "value_format": from_version_1(details["value_format"])}
            if details.get("key_format") is not None:
                details["key_format"] = from_version_1(details["key_format"])
        elif isinstance(details, dict) and details.get("@") == "SinkDesc":
            rows = {c.name: c for c in map(Column.from_json, columns[details["source"]])}
            key = tuple(rows[name] for name in details.get("key", ()))
            registry = details.get("registry_connection")
            value_sql, key_sql = details["value_format"], details.get("key_format") or details["value_format"]
            details = {k: v for k, v in details.items() if k != "registry_connection"}
            details["value_format"] = encode(sink_format_from_version_1(value_sql, tuple(rows.values()), registry))
            details["key_format"] = encode(sink_format_from_version_1(key_sql, key, registry)) if key else None
        upgraded.append({**item, "details": details})
    return {**data, "items": upgraded}
