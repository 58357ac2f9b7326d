"""Every `examples/*.sql` plans offline, as `sluice plan` shows it: parsed and planned
without error, with no Kafka client and no Spark loaded."""

import subprocess
import sys
from pathlib import Path

import pytest

import sluice

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.sql"))

# `sluice plan FILE`, then which of Spark's and Kafka's client modules it loaded.
PLAN = """
import sys
from sluice.cli.main import main
status = main(["plan", sys.argv[1]])
print("loaded:", sorted({m.split(".")[0] for m in sys.modules} & {"pyspark", "py4j", "confluent_kafka"}))
sys.exit(status)
"""


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_plans_offline(example: Path) -> None:
    result = subprocess.run([sys.executable, "-c", PLAN, str(example)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr, result.stderr
    shown = result.stdout.splitlines()
    assert shown[-1] == "loaded: []"
    statements = sluice.parse(example.read_text(encoding="utf-8"))
    assert [line for line in shown if line.startswith("-- ")] == [
        f"-- {s.redacted().to_sql()}" for s in statements
    ]
