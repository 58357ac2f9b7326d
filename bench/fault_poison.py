"""Poison messages against real sources: of the catalogue of hostile messages the test suite
keeps (tests/support/poison.py: every format, keys and values, every envelope), how many kinds break
a source — its snapshot SELECT failing for another reason than its own first error, `FROM
ONLY ERRORS` failing, a message unaccounted for, or the continuous ingestion of a twin with
a dead-letter table dying — on a local Spark session, the embedded broker and a loopback
schema registry.

Usage: python bench/fault_poison.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import poison  # noqa: E402
from tests.support.registry import Registry  # noqa: E402

import sluice  # noqa: E402
from sluice.kafka.embedded import EmbeddedKafka  # noqa: E402


def measure() -> list[tuple[str, object]]:
    # A dead stream is reported at once; a stalled one should not hold the bench for long.
    os.environ.setdefault("SLUICE_CATCH_UP_TIMEOUT", "60")
    registry = Registry(poison.REGISTRY_SUBJECTS)
    try:
        with EmbeddedKafka() as kafka, sluice.Session() as session:
            session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{kafka.bootstrap}')")
            session.execute(f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')")
            kinds = poison.kinds({name: registry.subjects[name][0] for name in poison.REGISTRY_SUBJECTS})
            broken = poison.broken(session, kafka, registry, kinds, seconds=60.0)
    finally:
        registry.close()
    return [
        ("poison kinds tried", len(kinds)),
        ("poison kinds that break a source", len(broken)),
        ("poison kinds breaking", "; ".join(f"{name} ({found[0][:120]})" for name, found in broken.items()) or "none"),
    ]


if __name__ == "__main__":
    for name, value in measure():
        print(f"{name}: {value}")
