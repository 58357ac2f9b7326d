"""Golden plan tests: tests/golden/plan/*.test, directive `plan`.

Each record's input is a script run in a fresh session that already has a Kafka
connection `kafka` and a schema registry connection `csr` (served by tests/support/registry.py).
The output is each statement's status and rows, or the error with its caret.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import sluice
from sluice.values import value_text
from tests.golden import Record, check_records, read_records
from tests.support.registry import Registry

GOLDEN = Path(__file__).parent / "golden" / "plan"
FILES = sorted(GOLDEN.glob("*.test"))

ROW = {"type": "record", "name": "row", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}]}
SUBJECTS = {
    "avro-value": {
        "type": "record",
        "name": "order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "price", "type": ["null", "double"]},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "address", "type": {"type": "record", "name": "address", "fields": [
                {"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
            {"name": "status", "type": {"type": "enum", "name": "status", "symbols": ["NEW", "PAID"]}},
            {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "attributes", "type": {"type": "map", "values": "long"}},
            {"name": "billing", "type": ["null", "address"]},
        ],
    },
    "avro-key": {"type": "record", "name": "key", "fields": [{"name": "id", "type": "long"}]},
    "compound-key": {"type": "record", "name": "key", "fields": [
        {"name": "region", "type": "string"}, {"name": "id", "type": "long"}]},
    "compound-value": {"type": "record", "name": "v", "fields": [{"name": "qty", "type": "int"}]},
    "dbz-key": {"type": "record", "name": "key", "fields": [{"name": "id", "type": "long"}]},
    "dbz-value": {"type": "record", "name": "envelope", "fields": [
        {"name": "before", "type": ["null", ROW]},
        {"name": "after", "type": ["null", "row"]},
        {"name": "op", "type": "string"}]},
    "scalar-value": "string",
    "union-value": {"type": "record", "name": "u", "fields": [
        {"name": "v", "type": ["null", "int", "string"]}]},
    "nodbz-value": {"type": "record", "name": "n", "fields": [{"name": "x", "type": "int"}]},
}


@pytest.fixture(scope="module")
def registry():
    server = Registry(SUBJECTS)
    yield server
    server.close()


def render(record: Record, registry: Registry) -> str:
    assert record.directive == "plan", f"line {record.line}: unknown directive"
    with sluice.Session(check_kafka=False) as session:
        session.execute_script(
            "CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092');"
            f"CREATE CONNECTION csr TO CONFLUENT SCHEMA REGISTRY (URL '{registry.url}')"
        )
        out: list[str] = []
        try:
            statements = sluice.parse(record.input)
            for statement in statements:
                result = session.execute_statement(statement)
                out.append(result.status)
                if result.notice:
                    out.append(f"NOTICE:  {result.notice}")
                if result.columns:
                    out.append("  " + " | ".join(result.columns))
                    out += ["  " + " | ".join(value_text(v) for v in row) for row in result.rows]
        except sluice.SqlError as e:
            out.append(sluice.format_error(e, record.input).replace(registry.url, "${registry}"))
        return "\n".join(out)



@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_golden(path: Path, registry: Registry, request: pytest.FixtureRequest) -> None:
    check_records(path, lambda r: render(r, registry), request.config.getoption("--rewrite"))


def test_golden_plan_corpus_size() -> None:
    records = [r for path in FILES for r in read_records(path)]
    shapes = [r for r in records if "CREATE SOURCE" in r.expected and "SHOW" in r.expected]
    errors = [r for r in records if "ERROR:" in r.expected]
    assert len(shapes) >= 40
    assert len(errors) >= 30
    assert all("^" in r.expected for r in errors), "every error case shows a caret"
