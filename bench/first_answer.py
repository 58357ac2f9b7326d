"""Time to first answer: the README's quick start — `sluice kafka serve`, `sluice kafka
produce` of its two messages, the REPL — timed from the server's start to the answer of
its first SELECT (and its second), in processes and a pseudo-terminal as a user runs them,
with where the REPL's time went: Spark's start, and within the first SELECT the start of
the source's continuous ingestion (it has a dead-letter table) — the snapshot read fixing
its offsets, the backlog's batch job, the stream's start — the catch-up and the query.

Usage: python bench/first_answer.py [--busy N] [--runs R] [--think S]

`--busy N` runs N CPU-bound processes (`while True: pass`) beside it for the whole run;
the machine's load average is printed with each run, since the times follow it.
`--think S` waits S seconds before typing each statement, as a user types it (the shell
starts Spark meanwhile); each answer is also timed from its
statement's Enter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pexpect

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.readme import quick_start  # noqa: E402
from tests.support.terminal import environment, free_port, quitting  # noqa: E402

# Run in the REPL's process: wraps the steps of a statement's ingestion start and query,
# appending (step, start, end) in seconds since the process began to $TIMINGS.
HOOKS = r"""
import json, os, sys, time
import sluice.storage.ingest as ingest
import sluice.render.executor as executor
import sluice.spark.session as spark
from sluice.storage.controller import Controller

BEGAN = time.monotonic()
OUT = open(os.environ["TIMINGS"], "a", buffering=1)

def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        start = time.monotonic()
        try:
            return inner(*args, **kwargs)
        finally:
            OUT.write(json.dumps([label, start - BEGAN, time.monotonic() - BEGAN]) + "\n")
    setattr(owner, name, wrapper)

timed(spark, "_build", "spark session built")
timed(Controller, "caught_up", "statement: ingestion started and caught up")
timed(executor, "run_snapshot", "statement: query run")
timed(ingest.Ingestion, "start", "ingestion: start (all of it)")
timed(ingest.Ingestion, "_commit_backlog", "ingestion: backlog committed by batch jobs")
timed(ingest, "streaming", "ingestion: stream started")
timed(Controller, "_catch_up", "ingestion: catch-up waited")
from sluice.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def run_once(scratch: Path, think: float) -> dict:
    commands, exchanges = quick_start()
    port = free_port()
    env = environment(TIMINGS=str(scratch / "timings.jsonl"))
    env.pop("SLUICE_BROKER", None)

    def argv(command: str, port: int) -> list[str]:
        words = command.split(" | ")[-1].replace("9092", str(port)).split()
        return [sys.executable, "-m", "sluice", *words[1:]]

    marks: dict[str, float] = {}
    began = time.monotonic()
    server = subprocess.Popen(argv(commands[0], port), env=env, stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        marks["broker listening"] = time.monotonic() - began
        subprocess.run(
            argv(commands[1], port), input='alice:{"amount": 5}\nbob:{oops\n', env=env, check=True, text=True
        )
        marks["messages produced"] = time.monotonic() - began
        repl = argv(commands[2], port)
        child = pexpect.spawn(
            sys.executable, ["-c", HOOKS, *repl[3:], "--data-dir", str(scratch / "data"),
                             "--history-file", str(scratch / "history")],
            env=env, encoding="utf-8", timeout=900, dimensions=(50, 300),
        )
        repl_began = time.monotonic() - began
        outputs = []
        with quitting(child, quit_timeout=120) as term:
            marks["prompt shown"] = time.monotonic() - began
            for n, (typed, _) in enumerate(exchanges):
                time.sleep(think)
                entered = time.monotonic()
                outputs.append(term.run(typed, timeout=900))
                took = time.monotonic() - entered
                marks[f"answer {n}: {typed.split()[0]} … {typed.split()[-1]} ({took:.1f} s after Enter)"] = (
                    time.monotonic() - began
                )
        ready = re.search(r"Spark is ready \(started in ([\d.]+) s\)", "\n".join(outputs))
    finally:
        server.terminate()
        server.wait(timeout=60)
    steps = [json.loads(line) for line in (scratch / "timings.jsonl").read_text().splitlines()]
    return {
        "load": os.getloadavg()[0],
        "marks": marks,
        "spark ready after (s, said by the REPL)": float(ready.group(1)) if ready else None,
        "steps in the REPL (s since the serve started)": [
            (label, round(start + repl_began, 1), round(end - start, 2)) for label, start, end in steps
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside it")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--think", type=float, default=0.0, help="seconds before typing each statement")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as scratch:
                result = run_once(Path(scratch), args.think)
            print(f"load average {result['load']:.1f}, {args.busy} CPU-bound processes beside it")
            for name, at in result["marks"].items():
                print(f"  {at:6.1f} s  {name}")
            print(f"  Spark ready after {result['spark ready after (s, said by the REPL)']} s (from the prompt)")
            for label, at, took in result["steps in the REPL (s since the serve started)"]:
                print(f"  {at:6.1f} s  +{took:5.2f} s  {label}")
    finally:
        for process in busy:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
