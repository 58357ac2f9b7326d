"""Hostile inputs, counted: what each entry point answers them with, and whether snapshot
SELECTs over a moving UPSERT topic see each key once.

Usage: python bench/fault_inputs.py [--texts N] [--queries N]

The corpus is tests/support/hostile_inputs.py's (tests/test_hostile_inputs.py asserts on the
same): every construct nested or chained to 32, 33, 1,000 and 10,000 levels, statements
that once crashed, N arbitrary texts, corrupt catalog files and malformed schema-registry
answers (a real HTTP server). They go through `sluice.parse`, `Session.plan`,
`Session.execute` (on a local Spark session, for what the parser takes), and `sluice run`
as a real subprocess. An answer is `ok` or a `SqlError` with a SQLSTATE; anything else —
another exception, an internal error (XX000), a traceback on stderr — is counted. Then
N snapshot SELECTs over an UPSERT source ingested from a topic a producer thread keeps
updating, each held between its reads until another micro-batch commits
(tests/support/moving_topic.py), on the embedded broker.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.hostile_inputs import (  # noqa: E402
    BRACKETED,
    CHAINS,
    CORRUPT_CATALOGS,
    DEPTHS,
    MALFORMED_REGISTRY_ANSWERS,
    MAX_NESTING,
    SETUP,
    HostileRegistry,
    hostile_statements,
    is_answer,
    outcome,
    random_texts,
)
from tests.support.moving_topic import KEYS, Producer, until_a_commit  # noqa: E402

import sluice  # noqa: E402
from sluice.storage.store import Store  # noqa: E402


def _through_the_api(texts: list[str]) -> list[str]:
    """Outcomes through sluice.parse and Session.plan (no Spark), and Session.execute on
    Spark for the deepest queries the parser takes."""
    results = []
    long_chains = {build(DEPTHS[-1]) for build in CHAINS.values()}
    with sluice.Session(check_kafka=False) as session:
        session.execute(SETUP)
        for text in texts:
            results.append(outcome(sluice.parse, text))
            if text not in long_chains:  # planning a 10,000-long chain takes minutes
                results.append(outcome(lambda sql: session.plan(sluice.parse_one(sql)), text))
        session.execute("""INSERT INTO t VALUES (1, '{"k": 1}', 'x')""")
        for build in BRACKETED.values():
            results.append(outcome(session.execute, build(MAX_NESTING)))
    return results


def _files_and_registries(scratch: Path) -> list[str]:
    results = []
    for name, content in CORRUPT_CATALOGS.items():
        data_dir = scratch / name.replace(" ", "-")
        data_dir.mkdir()
        (data_dir / "catalog.json").write_bytes(content)
        results.append(outcome(sluice.Session, str(data_dir)))
    registry = HostileRegistry()
    try:
        with sluice.Session(check_kafka=False) as session:
            session.execute(f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
            session.execute("CREATE CONNECTION k TO KAFKA (BROKER '127.0.0.1:1')")
            create = (
                "CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') "
                "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr"
            )
            for body in MALFORMED_REGISTRY_ANSWERS:
                registry.body = body
                results.append(outcome(session.execute, create))
    finally:
        registry.server.shutdown()
    return results


def _through_the_command_line(texts: list[str], scratch: Path) -> tuple[int, int]:
    """(statements run, statements not answered with a formatted ERROR) by one
    `sluice run --keep-going` over the texts sluice refuses before Spark."""
    script = scratch / "hostile.sql"
    script.write_text("".join(text.rstrip().rstrip(";") + ";\n" for text in texts))
    run = subprocess.run(
        [sys.executable, "-m", "sluice.cli.main", "run", "--keep-going", str(script)],
        capture_output=True,
        timeout=600,
    )
    stderr = run.stderr.decode("utf-8", "replace")
    answered = stderr.count("ERROR:  ")
    unanswered = max(len(texts) - answered, 0) + stderr.count("Traceback") + (run.returncode != 1)
    return len(texts), unanswered


def _moving_topic_queries(queries: int) -> tuple[int, int]:
    """(queries run, queries that saw a key more than once)."""
    from sluice.kafka.embedded import EmbeddedKafka, produce

    original = Store.frame
    Store.frame = until_a_commit(original)
    try:
        with EmbeddedKafka() as kafka, sluice.Session() as session:
            kafka.create_topic("moving", 1)
            produce(kafka.bootstrap, "moving", [(k.encode(), b"v0") for k in KEYS])
            session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
            session.execute(
                "CREATE SOURCE u FROM KAFKA CONNECTION kafka (TOPIC 'moving') "
                "KEY FORMAT TEXT VALUE FORMAT TEXT ENVELOPE UPSERT WITH (REDIRECT ERRORS = u_dlq)"
            )
            twice = 0
            with Producer(kafka.bootstrap, "moving"):
                for _ in range(queries):
                    keys = [row[0] for row in session.execute("SELECT key FROM u").rows]
                    twice += len(keys) != len(set(keys))
    finally:
        Store.frame = original
    return queries, twice


def measure(texts: int = 400, queries: int = 3) -> list[tuple[str, object]]:
    statements = [text for _, text in hostile_statements()]
    corpus = statements + random_texts(texts)
    results = _through_the_api(corpus)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-inputs-") as scratch:
        results += _files_and_registries(Path(scratch))
        refused = [t for t in statements if outcome(sluice.parse, t) != "ok"]
        run_tried, run_unanswered = _through_the_command_line(refused, Path(scratch))
    snapshots, with_duplicates = _moving_topic_queries(queries)
    not_answers = [r for r in results if not is_answer(r)]
    return [
        ("hostile inputs tried (API calls + sluice run statements)", len(results) + run_tried),
        ("answered with something other than a SqlError", len(not_answers) + run_unanswered),
        ("of which internal errors (XX000)", sum(r.startswith("internal error") for r in not_answers)),
        ("answered 54001 (stack depth limit exceeded)", sum(r == "54001" for r in results)),
        ("UPSERT snapshots over a moving topic", snapshots),
        ("snapshots that saw a key twice", with_duplicates),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--queries", type=int, default=3)
    args = parser.parse_args()
    for name, value in measure(args.texts, args.queries):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
