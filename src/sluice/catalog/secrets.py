"""Secret values, kept outside the catalog: one file per secret under `<data dir>/secrets/`.

A secret's catalog item holds its name and a redacted CREATE text; its value lives only in
`secrets/<item id>`, readable by its owner alone (mode 0600) and replaced crash-safely.
The value is read when something connects (the session's Kafka and registry look-ups, the
options a Spark reader is given), never while planning.

CREATE SECRET writes the value before the catalog names it, and DROP SECRET removes it
after, so a crash in between leaves a file no item names; opening the directory sets such
files aside (`sluice.storage.orphans`), as it does those an older catalog put back does not name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sluice.catalog.files import replace_file, sync_directory
from sluice.catalog.items import ConnectionDesc
from sluice.errors import CatalogCorrupt

DIRECTORY = "secrets"


class SecretValues(Protocol):
    """Where a connection's secrets are read from: a catalog snapshot (`Catalog`, which
    holds a `SecretStore`; named by what it does, so that neither module imports the other)."""

    def secret_value(self, secret_id: str) -> str: ...


class SecretStore:
    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / DIRECTORY

    def write(self, secret_id: str, value: str) -> None:
        self.root.mkdir(mode=0o700, exist_ok=True)
        replace_file(self.root / secret_id, value.encode("utf-8"))

    def read(self, secret_id: str, name: str) -> str:
        try:
            return (self.root / secret_id).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not UTF-8"
            raise CatalogCorrupt(
                f'the value of secret "{name}" cannot be read from '
                f"{str(self.root / secret_id)!r}: {reason}",
                hint="set it again with ALTER SECRET",
            ) from None

    def remove(self, secret_ids: Iterable[str]) -> None:
        removed = False
        for secret_id in secret_ids:
            path = self.root / secret_id
            if path.exists():
                path.unlink()
                removed = True
        if removed:
            sync_directory(self.root)


@dataclass(frozen=True)
class ConnectionOptions:
    """A connection's options as OPTION NAME → value: those given in the clear, and those
    read from the secrets they name (kept apart, so that what carries them can be
    redacted)."""

    clear: dict[str, str]
    secret: dict[str, str] = field(repr=False)

    def all(self) -> dict[str, str]:
        return {**self.clear, **self.secret}


def connection_options(connection: ConnectionDesc, catalog: SecretValues) -> ConnectionOptions:
    secret_ids = dict(connection.secret_options)
    clear, secret = {}, {}
    for name, sql in connection.properties:
        if name in secret_ids:
            secret[name] = catalog.secret_value(secret_ids[name])
        elif sql.startswith("'"):
            clear[name] = sql[1:-1].replace("''", "'")
        elif sql.upper().startswith("SECRET "):
            # Only a catalog written before sluice kept secrets has such an option.
            raise CatalogCorrupt(
                f"connection option {name} names a secret this catalog does not know",
                hint="create the secret with CREATE SECRET, then the connection again",
            )
        else:
            clear[name] = sql.upper()  # a word, such as SASL_SSL
    return ConnectionOptions(clear, secret)


def registry_login(connection: ConnectionDesc, catalog: SecretValues) -> tuple[str, str | None] | None:
    """(username, password) of a schema registry connection that gives a USERNAME."""
    options = connection_options(connection, catalog).all()
    if "USERNAME" not in options:
        return None
    return options["USERNAME"], options.get("PASSWORD")
