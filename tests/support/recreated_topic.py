"""A topic deleted and created again under a source, as a user does it with the embedded
broker: `sluice kafka serve --port P` (a child process) stopped and started again on the
same port — to a client, the topic's offsets back from 0 — or, cheaper, an embedded broker
of this process replaced on the same port. And `recreated_run`, one such run measured end
to end (the source's status and reason, then the source started over as its hint says),
which bench/fault_recreated.py repeats; tests/test_faults_outage.py asserts the details.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import sluice
from sluice.kafka.embedded import EmbeddedKafka, produce

ROOT = Path(__file__).resolve().parents[2]
Messages = list[tuple[None, bytes]]


def numbered(start: int, count: int, prefix: bytes = b"m") -> Messages:
    return [(None, b"%s%d" % (prefix, i)) for i in range(start, start + count)]


def renamed(start: int, count: int) -> Messages:
    """The re-created topic's messages, none of them equal to one of the old topic's."""
    return numbered(start, count, b"new")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spread(bootstrap: str, messages: Messages, partitions: int) -> None:
    """`messages` to topic "t", round robin over its `partitions`."""
    for partition in range(partitions):
        produce(bootstrap, "t", messages[partition::partitions], partition=partition)


class Served:
    """`sluice kafka serve --port P --topic t:N`, a real child process, until `close()`."""

    def __init__(self, port: int, partitions: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        env.pop("SLUICE_BROKER", None)
        self.errors = tempfile.TemporaryFile("w+")  # a file, not a pipe nobody drains
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sluice", "kafka", "serve", "--port", str(port), "--topic", f"t:{partitions}"],
            env=env, stdout=subprocess.PIPE, stderr=self.errors, text=True,
        )
        line = self.process.stdout.readline()
        if line != f"kafka listening on 127.0.0.1:{port}\n":
            self.close()
            raise RuntimeError(f"sluice kafka serve did not start: {line!r} {self.stderr}")

    def close(self) -> None:
        """Stopped as a user stops it (Ctrl-C), its topics gone with it; what it wrote to
        stderr kept in `stderr`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.errors.seek(0)
        self.stderr = self.errors.read()
        self.errors.close()


class InProcess:
    """An embedded broker of this process on `port` holding topic "t"."""

    def __init__(self, port: int, partitions: int) -> None:
        self.kafka = EmbeddedKafka(port=port)
        self.kafka.create_topic("t", partitions)

    def close(self) -> None:
        self.kafka.close()


class Recreatable:
    """Topic "t" on a broker at a fixed address, which `recreate` deletes and creates again
    (a new broker on the same port): its offsets from 0, the new messages only."""

    def __init__(self, messages: Messages, partitions: int = 1, *, served: bool = True) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._kind = Served if served else InProcess
        self._broker = self._started(messages, partitions)

    def _started(self, messages: Messages, partitions: int):
        broker = self._kind(self.port, partitions)
        spread(self.bootstrap, messages, partitions)
        return broker

    def recreate(self, messages: Messages, partitions: int = 1) -> None:
        self._broker.close()
        self._broker = self._started(messages, partitions)

    def close(self) -> None:
        self._broker.close()


def start_over_hint(source: str) -> str:
    return (
        f'the source cannot recover: to read its topic from the start, run SHOW CREATE SOURCE "{source}", '
        f'DROP SOURCE "{source}" CASCADE, then the CREATE SOURCE statement shown (and create again what CASCADE dropped)'
    )


MV = "CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n, min(text) AS first FROM src"


def create_source(session: sluice.Session, bootstrap: str) -> None:
    """Source `src` of topic "t" (its bad messages to `dlq`, short retry bounds) under `mv`."""
    session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{bootstrap}')")
    session.execute(
        "CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT TEXT "
        "WITH (REDIRECT ERRORS = dlq, RETRY TIMEOUT = '2s', RETRY DELAY MAX = '500ms')"
    )
    session.execute(MV)


def start_over(session: sluice.Session) -> None:
    """What the hint says to run: the source dropped and created again from its own SHOW
    CREATE SOURCE, then what CASCADE dropped (`mv`)."""
    (create,) = session.execute('SHOW CREATE SOURCE "src"').rows
    session.execute('DROP SOURCE "src" CASCADE')
    session.execute(create[-1])
    session.execute(MV)


def statistics(session: sluice.Session, source: str) -> dict:
    result = session.execute(f"SHOW SOURCE STATISTICS FOR {source}")
    (row,) = result.rows
    return dict(zip(result.columns, row))


def wait_for(condition, seconds: float = 60.0, every: float = 0.5):
    """`condition()`'s first truthy value, asked until `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


@dataclass(frozen=True)
class Run:
    """One way of re-creating the topic: `old` messages over `partitions`, then `new` over
    `partitions_after`, under a running session or while none ran."""

    old: int
    new: int
    partitions: int = 1
    partitions_after: int = 1
    while_running: bool = True

    def reason(self) -> str:
        """The reason the source must show: Materialize's words, with the offsets."""
        if self.partitions_after < self.partitions:
            return f"topic was recreated: partition count regressed from {self.partitions} to {self.partitions_after}"
        return (
            f"topic was recreated: high watermark of partition 0 regressed to "
            f"{len(range(0, self.new, self.partitions_after))}, below the committed offset "
            f"{len(range(0, self.old, self.partitions))}"
        )


@dataclass(frozen=True)
class RunOutcome:
    shown: list[tuple]  # (status, reason, a SELECT's error) in each session that saw the fault
    rows_wrong: int  # rows missing or extra in the source started over, against the new topic


def shown(session: sluice.Session, reason: str) -> tuple:
    """(status, reason, (code, message, hint) of a SELECT of the view or None) of `src`,
    once it shows `reason` (or two minutes have passed)."""
    wait_for(lambda: statistics(session, "src")["reason"] == reason, seconds=120)
    row = statistics(session, "src")
    try:
        session.execute("SELECT n FROM mv")
        error = None
    except sluice.SqlError as e:
        error = (e.code, e.message, e.hint)
    return row["status"], row["reason"], error


def expected_shown(reason: str) -> tuple:
    return "failed", reason, ("58000", f'Source error: source "src" has failed: {reason}', start_over_hint("src"))


def _answer(session: sluice.Session, sql: str) -> list | None:
    """`sql`'s rows, or None while its source is failed: a loaded machine fails a source
    with a short retry bound now and then (Spark's Python worker late), which then
    recovers by itself."""
    try:
        return session.execute(sql).rows
    except sluice.SqlError:
        return None


def recreated_run(run: Run, data_dir: Path) -> RunOutcome:
    """`run` on a `sluice kafka serve` child: the source reads the old topic, the topic is
    re-created, what each session shows is taken (the running one, the next, and one once
    the new topic has passed the old one's end); then the source is started over as the
    hint says, and its rows are compared with the new topic's."""
    topic = Recreatable(numbered(0, run.old), run.partitions)
    seen = []
    try:
        with sluice.Session(data_dir) as session:
            create_source(session, topic.bootstrap)
            wait_for(lambda: _answer(session, "SELECT n, first FROM mv") == [(run.old, "m0")], seconds=300)
            if run.while_running:
                topic.recreate(renamed(0, run.new), run.partitions_after)
                seen.append(shown(session, run.reason()))
        if not run.while_running:
            topic.recreate(renamed(0, run.new), run.partitions_after)
        with sluice.Session(data_dir) as session:
            seen.append(shown(session, run.reason()))
        # The new topic passes the old one's end: a source reading on from its committed
        # offsets would now take them for new messages. (Had it passed it before any
        # session saw the topic re-created, its offsets would not tell: see README.)
        spread(topic.bootstrap, renamed(run.new, run.old), run.partitions_after)
        with sluice.Session(data_dir) as session:
            seen.append(shown(session, run.reason()))
            start_over(session)
            got = Counter(text for (text,) in wait_for(lambda: _answer(session, "SELECT text FROM src"), 300) or [])
    finally:
        topic.close()
    expected = Counter(value.decode() for _, value in renamed(0, run.new + run.old))
    return RunOutcome(seen, sum(((got - expected) + (expected - got)).values()))
