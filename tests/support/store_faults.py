"""Faults done to continuously ingested sources, and what a session shows after them
checked against what was produced: the damages of tests/test_faults_store.py and the
kill rounds of tests/test_restart.py, shared with bench/fault_store.py.

Two sources are ingested: `n` (ENVELOPE NONE, TEXT, dead-letter table `dlq`) and `u`
(ENVELOPE UPSERT with inline value errors) under the materialized view `mv`. A damage is a
function of one source's store folder; it is done to both stores at once.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import sluice
from sluice.errors import SqlError
from sluice.kafka.embedded import EmbeddedKafka
from tests.support.keyed_topic import KEYS, VALUES, send
from tests.support.upsert_model import Message, upsert

SCRIPT = """
    CREATE CONNECTION kafka TO KAFKA (BROKER '{bootstrap}');
    CREATE SOURCE n FROM KAFKA CONNECTION kafka (TOPIC 'n') FORMAT TEXT INCLUDE PARTITION, OFFSET
      WITH (REDIRECT ERRORS = dlq);
    CREATE SOURCE u FROM KAFKA CONNECTION kafka (TOPIC 'u') KEY FORMAT TEXT VALUE FORMAT JSON
      ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE);
    CREATE MATERIALIZED VIEW mv AS SELECT key, error, data FROM IGNORE ERRORS u;
"""

QUERIES = {
    "n": 'SELECT text, partition, "offset" FROM n',
    "dlq": 'SELECT partition, "offset" FROM dlq',
    "mv": "SELECT key, error, data FROM mv",
    "errors": "SELECT message FROM ONLY ERRORS u",
    "statistics": "SHOW SOURCE STATISTICS",
}
BAD_TEXT = b"\xff"


class Produced:
    """The topics `n` and `u` and what was produced to them: what every relation must show."""

    def __init__(self, bootstrap: str, seed: int = 3) -> None:
        self.bootstrap = bootstrap
        self.rng = random.Random(seed)
        self.none: list[Message] = []
        self.upsert: list[Message] = []

    def create_topics(self, kafka) -> None:
        kafka.create_topic("n", 2)
        kafka.create_topic("u", 2)

    def more(self, count: int) -> None:
        """`count` messages to each topic, a good and a bad one among them."""
        rng = self.rng
        texts = [b"x", BAD_TEXT] + [rng.choice([b"x", b"y", BAD_TEXT]) for _ in range(count - 2)]
        self.none += send(self.bootstrap, "n", [(rng.choice([b"a", b"b"]), t) for t in texts])
        pairs = [(b"a", b'{"v":0}')] + [(rng.choice(KEYS), rng.choice(VALUES)) for _ in range(count - 1)]
        self.upsert += send(self.bootstrap, "u", pairs)

    def expected(self) -> dict[str, list]:
        rows, errors = upsert(self.upsert, inline=True)
        bad = [m for m in self.none if m.value == BAD_TEXT]
        return {
            "n": _sorted((m.value.decode(), m.partition, m.offset) for m in self.none if m.value != BAD_TEXT),
            "dlq": _sorted((m.partition, m.offset) for m in bad),
            "mv": _sorted(rows),
            "errors": _sorted((message,) for message in errors),
            "statistics": [("n", len(self.none), len(bad), len(bad)), ("u", len(self.upsert))],
        }


def _sorted(rows) -> list:
    return sorted(rows, key=repr)


def shown(session: sluice.Session) -> dict[str, list]:
    """What the session shows, in the shape of `Produced.expected`."""
    out = {}
    for name, sql in QUERIES.items():
        rows = session.execute(sql).rows
        if name == "mv":
            rows = [(k, None if e is None else e.description, d) for k, e, d in rows]
        if name == "statistics":
            counts = {r[0]: r[1:4] for r in rows}
            out[name] = [("n", *counts["n"]), ("u", counts["u"][0])]
        else:
            out[name] = _sorted(rows)
    return out


def differences(got: dict[str, list], expected: dict[str, list]) -> tuple[int, int]:
    """(rows produced but not shown, rows shown more often than produced) over the
    relations, the source counters aside."""
    lost = extra = 0
    for name, rows in expected.items():
        if name != "statistics":
            shown_rows, produced_rows = Counter(got[name]), Counter(rows)
            lost += sum((produced_rows - shown_rows).values())
            extra += sum((shown_rows - produced_rows).values())
    return lost, extra


def outcome(session: sluice.Session, produced: Produced) -> str:
    """`right`, `loud: <error>` (a data-corrupted error), or what is wrong: `lost …` when
    a relation shows fewer rows than were produced, else `wrong …`."""
    try:
        got = shown(session)
    except SqlError as e:
        detail = f" ({e.detail})" if e.detail else ""  # an internal error's names the Python error
        return f"loud: {e.message}" if e.code == "XX001" else f"wrong: {e.code} {e.message}{detail}"
    expected = produced.expected()
    lost, extra = differences(got, expected)
    if lost or extra or got != expected:
        kind = "lost" if lost else "wrong"
        return f"{kind}: {lost} rows missing, {extra} extra; showed {got}, produced {expected}"
    return "right"


def open_session(data_dir: Path, bootstrap: str, *, create: bool = False) -> sluice.Session:
    session = sluice.Session(data_dir)
    if create:
        session.execute_script(SCRIPT.format(bootstrap=bootstrap))
    return session


def data_root(data_dir: Path) -> Path:
    """Where a data directory's data is: in it, or in the folder of the `file://` data URI
    it keeps its data under (`SLUICE_DATA_URI` set for a run of these tests)."""
    recorded = data_dir / "data-location"
    return Path(urlsplit(recorded.read_text()).path) if recorded.exists() else data_dir


def stores(data_dir: Path) -> list[Path]:
    return sorted((data_root(data_dir) / "streams").iterdir())


def baseline(data_dir: Path, older: Path, produced: Produced, rounds: int = 3) -> None:
    """A data directory whose stores hold `rounds` commits or more (one per round), and in
    `older` a copy of each store's checkpoint after the first round."""
    with open_session(data_dir, produced.bootstrap, create=True) as session:
        for round in range(rounds):
            produced.more(6)
            for relation in ("n", "mv"):  # each stream commits what was produced so far
                session.execute(f"SELECT count(*) FROM {relation}")
            if round == 0:
                for store in stores(data_dir):
                    shutil.copytree(store / "checkpoint", older / store.name)
        result = outcome(session, produced)
        assert result == "right", result


# -- damages: each a function of a store folder (and the older checkpoint copies) ----------


def _record(store: Path, commit: int | None = None) -> Path:
    commits = sorted((store / "commits").glob("*.json"), key=lambda p: int(p.stem))
    return commits[-1] if commit is None else store / "commits" / f"{commit}.json"


def _listed(store: Path, commit: int = 1) -> Path:
    """A file commit `commit` lists, its rows if it has any."""
    files = json.loads(_record(store, commit).read_text())["files"]
    return store / max(files, key=lambda f: f["kind"] == "oks")["path"]


def _halve(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _add_strays(store: Path) -> None:
    source = _listed(store, 0)
    shutil.copy(source, _listed(store, 1).parent / "part-99999-stray.c000.snappy.parquet")
    shutil.copytree(source.parent.parent, store / "batches" / "99")


def _leave_staging(store: Path) -> None:
    """What a session killed while writing a batch leaves."""
    shutil.copytree(_listed(store, 0).parent.parent, store / "batch-7-leftover" / "out")


def _restore_older_checkpoint(store: Path, older: Path) -> None:
    shutil.rmtree(store / "checkpoint")
    shutil.copytree(older / store.name, store / "checkpoint")


def _truncate_checkpoint_offsets(store: Path) -> None:
    offsets = store / "checkpoint" / "offsets"
    last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    _halve(last)


DAMAGES = {
    "file emptied": lambda store, older: _listed(store).write_bytes(b""),
    "file deleted": lambda store, older: _listed(store).unlink(),
    "byte flipped in a file": lambda store, older: _flip_byte(_listed(store)),
    "batch folder deleted": lambda store, older: shutil.rmtree(_listed(store).parent.parent),
    "commit record truncated": lambda store, older: _halve(_record(store, 1)),
    "commit record deleted": lambda store, older: _record(store, 1).unlink(),
    "last commit record truncated": lambda store, older: _halve(_record(store)),
    "last commit record deleted": lambda store, older: _record(store).unlink(),
    "checkpoint deleted": lambda store, older: shutil.rmtree(store / "checkpoint"),
    "checkpoint offsets truncated": lambda store, older: _truncate_checkpoint_offsets(store),
    "older checkpoint restored": _restore_older_checkpoint,
    "stray files added": lambda store, older: _add_strays(store),
}

# Damages also done while the session runs (a checkpoint is Spark's while its stream runs).
WHILE_RUNNING = [
    "file emptied",
    "file deleted",
    "byte flipped in a file",
    "batch folder deleted",
    "commit record truncated",
    "last commit record deleted",
    "stray files added",
]


def damage_case(base: Path, older: Path, work: Path, produced: Produced, damage: str, running: bool) -> str:
    """Copy the baseline data directory to `work`, do `damage` to both stores (with the
    session stopped, leaving a staging folder too, or while it runs), produce more, and
    read everything back. While it runs, a read may first find a source failed by the
    damage — the visible state a user sees — until its stream restarts and repairs it."""
    data_dir = work / "data"
    shutil.copytree(base, data_dir)
    session = open_session(data_dir, produced.bootstrap) if running else None
    try:
        if session is not None:
            shown(session)  # the streams run
        for store in stores(data_dir):
            if session is None:
                _leave_staging(store)
            DAMAGES[damage](store, older)
        produced.more(6)
        if session is None:
            session = open_session(data_dir, produced.bootstrap)
            result = outcome(session, produced)
        else:
            result = _outcome_once_restarted(session, produced)
    finally:
        if session is not None:
            session.close()
    leftovers = [p for store in stores(data_dir) for p in store.glob("batch-*")]
    return result if result != "right" or not leftovers else f"staging left: {leftovers}"


# How long a source failed by a damage done while it runs may take to restart and repair.
RESTART_SECONDS = 120


def _outcome_once_restarted(session: sluice.Session, produced: Produced) -> str:
    deadline = time.monotonic() + RESTART_SECONDS
    while (result := outcome(session, produced)).startswith("wrong: 58000") and time.monotonic() < deadline:
        time.sleep(1)
    return result


# -- kill rounds ---------------------------------------------------------------------------

CHILD = Path(__file__).resolve().parent / "restart_child.py"
ROOT = CHILD.parents[2]


def kill_rounds(
    data_dir: Path, produced: Produced, rounds: int, rng: random.Random, log: Path, child_script: Path = CHILD
) -> None:
    """`rounds` times: a session on `data_dir` in a process of its own (`child_script`,
    tests/support/restart_child.py unless told) catches up, works while messages arrive
    (`produced.more`), and is killed (SIGKILL) at a random point."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    for _ in range(rounds):
        with open(log, "a") as errors:
            child = subprocess.Popen(
                [sys.executable, str(child_script), str(data_dir), produced.bootstrap],
                stdout=subprocess.PIPE, stderr=errors, env=env, text=True,
            )
        try:
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the session did not start: {log.read_text()[-3000:]}")
            deadline = time.monotonic() + rng.uniform(0.2, 2.5)
            while time.monotonic() < deadline:
                produced.more(rng.randint(3, 20))
                time.sleep(rng.uniform(0, 0.15))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()


def killed_and_reopened(tmp_path: Path, rounds: int, seed: int, left: str) -> str:
    """The outcome of a session reopened after `rounds` kill rounds on one data directory,
    once the killed sessions are seen to have left files matching `left` in it."""
    data_dir = tmp_path / "data"
    with EmbeddedKafka() as kafka:
        produced = Produced(kafka.bootstrap, seed=seed)
        produced.create_topics(kafka)
        produced.more(20)
        kill_rounds(data_dir, produced, rounds, random.Random(rounds), tmp_path / "child.log")
        produced.more(10)
        assert list(data_root(data_dir).glob(left)), f"the killed sessions left nothing matching {left}"
        with open_session(data_dir, kafka.bootstrap) as reopened:
            return outcome(reopened, produced)
