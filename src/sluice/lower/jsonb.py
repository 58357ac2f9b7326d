"""What the jsonb rules share: jsonb on Spark is a VARIANT (sources parse it so;
`QueryRenderer` parses tables' stored text), reached through Spark's VARIANT functions."""

from __future__ import annotations

from sqlglot import exp

JSON_TYPES = (exp.DataType.Type.JSON, exp.DataType.Type.JSONB)
# schema_of_variant's names → jsonb_typeof's (every other scalar is a JSON number).
JSON_TYPEOF = {"OBJECT": "object", "ARRAY": "array", "STRING": "string", "BOOLEAN": "boolean", "VOID": "null"}


def call(name: str, *arguments: exp.Expr) -> exp.Expr:
    """A Spark function call as written (sqlglot would drop `parse_json` for Spark)."""
    return exp.Anonymous(this=name, expressions=list(arguments))


def kind_is(schema: exp.Expr, prefix: str) -> exp.Expr:
    """Whether a `schema_of_variant` result names the JSON type `prefix` (`JSON_TYPEOF`)."""
    return call("startswith", schema.copy(), exp.Literal.string(prefix))
