"""Who may open a data directory, and where a secret's value could show: the scenarios
tests/test_faults_access.py checks and bench/fault_access.py counts, on real components
(processes, files, the embedded broker, a schema registry demanding a login, a SASL door
speaking Kafka's protocol, Spark).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import fastavro

import sluice
from sluice.catalog.secrets import DIRECTORY as SECRETS_DIRECTORY
from sluice.kafka.embedded import EmbeddedKafka, produce
from sluice.kafka.encode import avro_datum, confluent_frame
from tests.support.registry import Registry
from tests.support.sasl_broker import SaslBroker

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "access_child.py"

# ---------------------------------------------------------------- one process per directory


class Child:
    """A session in another process (tests/support/access_child.py) on a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])},
            text=True,
        )
        self.opening = json.loads(self.process.stdout.readline())

    def ask(self, sql: str) -> dict:
        self.process.stdin.write(sql.replace("\n", " ") + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def finish(self) -> int:
        """Close its input: the session closes and the process ends."""
        self.process.stdin.close()
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def files_of(data_dir: Path) -> dict[str, tuple]:
    """Every entry under the directory: (kind, content, mode, modification time)."""
    found = {}
    for path in sorted(data_dir.rglob("*")):
        status = path.stat()
        content = path.read_bytes() if path.is_file() else None
        found[str(path.relative_to(data_dir))] = (content, status.st_mode, status.st_mtime_ns)
    return found


@dataclass
class LockFindings:
    tried: int
    refused: int
    # Refusals naming the holder's process id as DESIGN words it.
    named_holder: int
    # Files of the directory a refused session changed, created or removed.
    touched: list[str]
    holder_kept_working: bool
    reopened_after_close: bool
    reopened_after_kill: bool


def lock_scenario(data_dir: Path, tries: int = 3) -> LockFindings:
    """A session holds the directory while `tries` other processes (and as many sessions
    in this process) try to open it; the holder goes on, then closes; another holder is
    killed with SIGKILL."""
    holder = Child(data_dir)
    try:
        holder.ask("CREATE TABLE before (x int)")
        before = files_of(data_dir)
        expected = f'data directory "{data_dir.resolve()}" is in use by process {holder.process.pid}'
        answers = []
        for _ in range(tries):
            refused = Child(data_dir)
            answers.append(refused.opening)
            refused.finish()
            try:
                sluice.Session(data_dir, check_kafka=False).close()
                answers.append({"opened": os.getpid()})
            except sluice.SqlError as e:
                answers.append({"code": e.code, "message": e.message})
        after = files_of(data_dir)
        touched = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        working = holder.ask("CREATE TABLE after (x int)").get("status") == "CREATE TABLE"
        working &= holder.ask("SHOW TABLES")["rows"] == [["after", "table", None], ["before", "table", None]]
    finally:
        holder.finish()
    reopened = Child(data_dir)
    reopened_after_close = "opened" in reopened.opening
    reopened.kill()  # SIGKILL: the operating system drops its lock
    last = Child(data_dir)
    reopened_after_kill = "opened" in last.opening
    last.finish()
    return LockFindings(
        tried=len(answers),
        refused=sum(a.get("code") == "55006" for a in answers),
        named_holder=sum(a.get("message") == expected for a in answers),
        touched=touched,
        holder_kept_working=working,
        reopened_after_close=reopened_after_close,
        reopened_after_kill=reopened_after_kill,
    )


# ---------------------------------------------------------------- secrets

REGISTRY_USER, REGISTRY_PASSWORD, WRONG_PASSWORD = "reader", "registry-Pa55-7f3a", "wrong-Pa55-91c2"
SASL_USER, SASL_PASSWORD = "alice", "sasl-Pa55-c0de"
SECRET_VALUES = (REGISTRY_PASSWORD, WRONG_PASSWORD, SASL_PASSWORD)
AVRO = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}


def avro(datum: dict, schema_id: int) -> bytes:
    return confluent_frame(schema_id, avro_datum(fastavro.parse_schema(AVRO), datum))


@dataclass
class SecretFindings:
    produced: int = 0
    decoded: int = 0
    # What each place showed: SHOW CREATE, EXPLAIN, errors, Spark plans, Spark's log.
    shown: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    files_checked: int = 0
    # Places (a kind of output, or a file under the data directory) holding a value.
    leaks: list[str] = field(default_factory=list)
    registry_refused: int = 0
    registry_by_id: int = 0  # schema look-ups by id, which only decoders make
    sasl_logins_driver: list = field(default_factory=list)
    sasl_logins_task: list = field(default_factory=list)
    secret_file_modes: list[int] = field(default_factory=list)

    @property
    def places_checked(self) -> int:
        return len(self.shown) + self.files_checked


def secret_scenario(data_dir: Path, messages: int = 50) -> SecretFindings:
    """Secrets used every way sluice uses them — a registry login by the session and by
    Spark's decoders (continuous and snapshot), SASL by the session's client and a Spark
    task's — then every place a value could show is searched for the values."""
    from sluice.spark.session import spark, spark_log_path

    found = SecretFindings()
    registry = Registry({"s-value": AVRO, "t-value": AVRO}, login=(REGISTRY_USER, REGISTRY_PASSWORD))
    with EmbeddedKafka() as kafka, SaslBroker(SASL_USER, SASL_PASSWORD) as door:
        try:
            for topic in ("s", "t"):
                kafka.create_topic(topic, 1)
                schema_id = registry.subjects[f"{topic}-value"][0]
                produce(kafka.bootstrap, topic, [(None, avro({"a": i}, schema_id)) for i in range(messages)])
                found.produced += messages
            with sluice.Session(data_dir) as session:
                _use_secrets(session, kafka, door, registry, found)
                _spark_task_login(spark(), session, door, found)
                found.shown["Spark plans"] += _streaming_plans(spark())
        finally:
            registry.close()
        found.shown["Spark log"].append(spark_log_path().read_text(errors="replace"))
    found.registry_refused = sum(registry.refused.values())
    found.registry_by_id = registry.answered["by_id"]
    found.leaks = [place for place, texts in found.shown.items() if _holds_secret(texts)]
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        if path.parent.name == SECRETS_DIRECTORY:
            found.secret_file_modes.append(path.stat().st_mode & 0o777)
            continue
        found.files_checked += 1
        if _holds_secret([path.read_bytes().decode("utf-8", "replace")]):
            found.leaks.append(f"file {path.relative_to(data_dir)}")
    return found


def _holds_secret(texts: list[str]) -> bool:
    return any(value in text for text in texts for value in SECRET_VALUES)


def _use_secrets(session, kafka, door, registry, found: SecretFindings) -> None:
    def error_of(sql: str) -> None:
        try:
            session.execute(sql)
        except sluice.SqlError as e:
            found.shown["errors"].append(sluice.format_error(e, sql))
        else:
            raise AssertionError(f"expected an error from {sql}")

    session.execute_script(
        f"""
        CREATE SECRET registry_password AS '{REGISTRY_PASSWORD}';
        CREATE SECRET kafka_password AS '{SASL_PASSWORD}';
        CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}');
        CREATE CONNECTION sasl TO KAFKA (BROKER '{door.bootstrap}', SECURITY PROTOCOL SASL_PLAINTEXT,
          SASL MECHANISMS PLAIN, SASL USERNAME '{SASL_USER}', SASL PASSWORD SECRET kafka_password)
          WITH (VALIDATE = false);
        CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}',
          USERNAME '{REGISTRY_USER}', PASSWORD SECRET registry_password);
        CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 's')
          FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr WITH (REDIRECT ERRORS = s_dlq);
        CREATE SOURCE t FROM KAFKA CONNECTION kafka (TOPIC 't')
          FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;
        """
    )
    found.decoded = sum(session.execute(f"SELECT count(*) FROM {n}").rows[0][0] for n in ("s", "t"))
    for show in ("CONNECTION kafka", "CONNECTION sasl", "CONNECTION csr", "SECRET registry_password",
                 "SECRET kafka_password", "SOURCE s"):
        found.shown["SHOW CREATE"] += [row[1] for row in session.execute(f"SHOW CREATE {show}").rows]
    for explained in ("CREATE SOURCE u FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT AVRO USING "
                      "CONFLUENT SCHEMA REGISTRY CONNECTION csr", "SELECT * FROM s JOIN t ON true"):
        found.shown["EXPLAIN"] += [row[0] for row in session.execute(f"EXPLAIN {explained}").rows]
    found.shown["SHOW"] += [str(session.execute(f"SHOW {kind}").rows) for kind in ("SECRETS", "CONNECTIONS")]
    # SASL: the session's own client logs in at the door (which has no topic to give).
    error_of("CREATE SOURCE x FROM KAFKA CONNECTION sasl (TOPIC 'x') FORMAT TEXT")
    found.sasl_logins_driver = list(door.presented)
    # A wrong registry password: refused by the registry at CREATE, and by every decoder.
    session.execute(f"ALTER SECRET registry_password AS '{WRONG_PASSWORD}'")
    error_of("CREATE SOURCE y FROM KAFKA CONNECTION kafka (TOPIC 't') FORMAT AVRO USING "
             "CONFLUENT SCHEMA REGISTRY CONNECTION csr")
    error_of("SELECT * FROM t")
    error_of("SELECT message FROM ONLY ERRORS t")
    session.execute(f"ALTER SECRET registry_password AS '{REGISTRY_PASSWORD}'")


def _spark_task_login(spark, session, door, found: SecretFindings) -> None:
    """A Spark task reads with the SASL connection's options: the door sees its login."""
    from sluice.kafka.retry import RetryPolicy
    from sluice.spark.kafka_source import NAME
    from sluice.storage.source import reader_options

    catalog = session.catalog.current
    desc = replace(catalog.get("t").details, connection=catalog.get("sasl").id)
    options = {**reader_options(desc, catalog), "ranges": "[[0, 0, 1]]", "retry": RetryPolicy(2, 1).to_json()}
    frame = spark.read.format(NAME).options(**options).load()
    stream = spark.readStream.format(NAME).options(**options).load()
    found.shown["Spark plans"] += [frame._jdf.queryExecution().toString(), stream._jdf.queryExecution().toString()]
    before = len(door.presented)
    try:
        frame.collect()
    except Exception as e:  # noqa: BLE001 - the door has no data: the read fails; its text is searched too
        found.shown["errors"].append(str(e))
    found.sasl_logins_task = door.presented[before:]


def _streaming_plans(spark) -> list[str]:
    plans = []
    for query in spark.streams.active:
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            query.explain(extended=True)
        plans += [shown.getvalue(), *(str(progress) for progress in query.recentProgress)]
    return plans
