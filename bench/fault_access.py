"""Access under faults, counted: second sessions on a held data directory (other processes
and this one) and what they touched; the places a secret's value could show and where it
does; messages decoded through a schema registry that demands a login.

Usage: python bench/fault_access.py [--tries N] [--messages N]

The scenarios are tests/support/access_scenarios.py's (tests/test_faults_access.py asserts on the
same): real processes (one killed with SIGKILL), files on disk, the embedded broker, an
HTTP schema registry answering 401 without the right login, a SASL door speaking Kafka's
protocol, and a local Spark session. Places searched for a value: every file under the
data directory but the secret files, SHOW CREATE / SHOW output, EXPLAIN, error texts
(the session's and a failed Spark task's), Spark's plan strings and progress, Spark's log.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.access_scenarios import SASL_PASSWORD, SASL_USER, lock_scenario, secret_scenario  # noqa: E402


def measure(tries: int = 5, messages: int = 200) -> list[tuple[str, object]]:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-access-") as scratch:
        lock = lock_scenario(Path(scratch) / "held", tries=tries)
        secrets = secret_scenario(Path(scratch) / "secrets", messages=messages)
    login = (SASL_USER, SASL_PASSWORD)
    return [
        ("second sessions tried", lock.tried),
        ("second sessions refused", lock.refused),
        ("refusals naming the holder's process", lock.named_holder),
        ("files a refused session touched", len(lock.touched)),
        ("holder kept working", "yes" if lock.holder_kept_working else "no"),
        ("reopened after the holder closed / was killed",
         f"{'yes' if lock.reopened_after_close else 'no'} / {'yes' if lock.reopened_after_kill else 'no'}"),
        ("places searched for a secret value", secrets.places_checked),
        ("places a secret value appears", len(secrets.leaks)),
        ("registry-login messages produced", secrets.produced),
        ("registry-login messages decoded", secrets.decoded),
        ("SASL logins presenting the secret: session / Spark task",
         f"{secrets.sasl_logins_driver.count(login)} / {secrets.sasl_logins_task.count(login)}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    for name, value in measure(args.tries, args.messages):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
