"""An older `catalog.json` put back (issue 35), counted on real components (Spark, the
embedded broker, files on disk).

A data directory gets, statement by statement, a table, a source with stored rows and its
dead-letter table, a secret, a table written then dropped, and a sink that delivered. For
each restore point a fresh data directory is built that far and on to the end, then the
catalog as it was at that point is put back, the directory opened, and new items created
in the place of the later ones (a source of another topic, a secret, a sink, a table).
Printed: the ids a new item got that an item of the directory had had before, the files of
the items the older catalog does not name that are gone (neither in place nor set aside
under `orphaned/`, byte for byte), the rows a new source showed that are not its own
topic's, and the new sinks that did not deliver their rows.

Usage: python bench/fault_restored.py
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.*

from tests.support.sinks import read_committed, upserted  # noqa: E402
from tests.support.store_faults import data_root  # noqa: E402

import sluice  # noqa: E402
from sluice.catalog.store import FILE_NAME  # noqa: E402
from sluice.kafka.embedded import EmbeddedKafka, produce  # noqa: E402
from sluice.storage.orphans import DATA_FOLDERS, ORPHANED  # noqa: E402

# Each a point a copy of catalog.json may have been taken at (after it).
STEPS = (
    "CREATE TABLE keep (a int)",
    "CREATE SOURCE a FROM KAFKA CONNECTION k (TOPIC 'ta') FORMAT TEXT WITH (REDIRECT ERRORS = a_dlq)",
    "CREATE SECRET pw AS 'hunter2'",
    "CREATE TABLE gone (a int); INSERT INTO gone VALUES (7)",
    "CREATE SINK sk FROM keep INTO KAFKA CONNECTION k (TOPIC 'o1') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT",
    "DROP TABLE gone",
)
RESTORE_POINTS = (1, 2, 4)  # steps done when the copy was taken
# Created after the older catalog is back, each unless the catalog already has its name.
NEW = (
    ("b", "CREATE SOURCE b FROM KAFKA CONNECTION k (TOPIC 'tb') FORMAT TEXT WITH (REDIRECT ERRORS = b_dlq)"),
    ("pw2", "CREATE SECRET pw2 AS 'other'"),
    ("t2", "CREATE TABLE t2 (a int)"),
    ("sk2", "CREATE SINK sk2 FROM keep INTO KAFKA CONNECTION k (TOPIC '{topic}') KEY (a) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT"),
)
_OWNER = re.compile(r"(u[0-9]+)(\.jsonl)?")


def _files_of(roots: list[tuple[Path, str]], named: set[str]) -> dict[Path, bytes]:
    """{path relative to its root's folder: bytes} of every file of an item not `named`."""
    files = {}
    for root, folder in roots:
        for entry in (root / folder).glob("*"):
            owner = _OWNER.fullmatch(entry.name)
            if owner and owner.group(1) not in named:
                paths = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
                files |= {p.relative_to(root): p.read_bytes() for p in paths}
    return files


def _gone(root_of: dict[str, Path], before: dict[Path, bytes]) -> int:
    """Files of `before` found neither in place nor under `<root>/orphaned/*/`, same bytes."""
    missing = 0
    for relative, content in before.items():
        root = root_of[relative.parts[0]]
        places = [root / relative, *(root / ORPHANED).glob(f"*/{relative}")]
        missing += not any(p.is_file() and p.read_bytes() == content for p in places)
    return missing


def restored_run(kafka: EmbeddedKafka, work: Path, point: int) -> tuple[int, int, int, int, int, int]:
    """(new items, ids reused, files of items the older catalog does not name, of them
    gone, rows not the new source's own, new sinks that delivered nothing) for the catalog
    taken after `point` steps put back."""
    data_dir, topic = work / f"point-{point}", f"o2-{point}"
    kafka.create_topic(topic, 1)
    ever: set[str] = set()
    with sluice.Session(data_dir) as session:
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}')")
        for done, sql in enumerate(STEPS):
            if done == point:
                older = (data_dir / FILE_NAME).read_bytes()
                named = {item.id for item in session.catalog.current}
            session.execute_script(sql)
            ever |= {item.id for item in session.catalog.current}
            if sql.startswith("CREATE SOURCE"):
                session.execute("SELECT count(*) FROM a")  # its rows stored
        session.execute("INSERT INTO keep VALUES (1)")
        session.drain_sinks(300)
    data = data_root(data_dir)
    root_of = {"secrets": data_dir, **{folder: data for folder in DATA_FOLDERS}}
    before = _files_of([(data_dir, "secrets"), *((data, folder) for folder in DATA_FOLDERS)], named)
    (data_dir / FILE_NAME).write_bytes(older)
    with sluice.Session(data_dir) as session:
        names = {item.name for item in session.catalog.current}
        for name, sql in NEW:
            if name not in names:
                session.execute(sql.format(topic=topic))
        new_ids = {item.id for item in session.catalog.current} - named
        not_own = len(set(session.execute("SELECT text FROM b").rows) - {("b1",)})
        session.execute("INSERT INTO keep VALUES (2)")
        session.drain_sinks(300)
    undelivered = int(b'{"a":2}' not in upserted(read_committed(kafka.bootstrap, topic)))
    return len(new_ids), len(new_ids & ever), len(before), _gone(root_of, before), not_own, undelivered


def measure() -> list[tuple[str, object]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="sluice-fault-restored-") as work, EmbeddedKafka() as kafka:
        for topic in ("ta", "tb", "o1"):
            kafka.create_topic(topic, 1)
        produce(kafka.bootstrap, "ta", [(None, b"a1"), (None, b"a2")])
        produce(kafka.bootstrap, "tb", [(None, b"b1")])
        for point in RESTORE_POINTS:
            results.append(restored_run(kafka, Path(work), point))
    new, reused, unnamed, gone, not_own, undelivered = (sum(column) for column in zip(*results))
    return [
        ("older catalogs put back (restore points tried)", len(RESTORE_POINTS)),
        ("  new items created once it was back", new),
        ("  ids reused by new items", reused),
        ("  files of items the older catalog does not name", unnamed),
        ("  of them deleted or changed", gone),
        ("  rows a new source showed from another item's store", not_own),
        ("  new sinks that did not deliver", undelivered),
    ]


if __name__ == "__main__":
    for name, value in measure():
        print(f"{name}: {value}")
