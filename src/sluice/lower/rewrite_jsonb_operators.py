"""Rule: jsonb's operators, functions and casts as Spark's VARIANT functions.

`->` / `#>` extract a jsonb (a JSON `null` stays jsonb `null`, a missing key or index is
NULL), `->>` / `#>>` its text (a string unquoted, JSON `null` as NULL), `jsonb_typeof`
names its JSON type, `jsonb::text` is its JSON text and `text::jsonb` parses.
"""

from __future__ import annotations

import re

from sqlglot import exp

from sluice.errors import FeatureNotSupported
from sluice.lower.jsonb import JSON_TYPEOF, JSON_TYPES, call, kind_is

# Each extraction operator → whether it yields text (else a jsonb).
_EXTRACTS: dict[type[exp.Expr], bool] = {
    exp.JSONExtract: False,
    exp.JSONBExtract: False,
    exp.JSONExtractScalar: True,
    exp.JSONBExtractScalar: True,
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rewrite_jsonb_operators(expression: exp.Expr) -> exp.Expr:
    """`expression`'s jsonb operators, functions and casts rewritten in place, innermost
    first (an outer operator's operand is then already rewritten). A path that is not a
    constant, or that no VARIANT path can spell, is refused (`FeatureNotSupported`)."""
    nodes = [n for n in expression.find_all(*_EXTRACTS, exp.Anonymous, exp.Cast) if _is_jsonb_operation(n)]
    for node in reversed(nodes):
        node.replace(_json_sql(node))
    return expression


def _is_jsonb_operation(node: exp.Expr) -> bool:
    """Whether `node` is a jsonb operator, function or cast the rule rewrites."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower() == "jsonb_typeof"
    if isinstance(node, exp.Cast):
        return node.to.is_type(*JSON_TYPES) or node.this.is_type(*JSON_TYPES)
    return True


def _json_sql(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous):
        return _typeof(node.expressions[0])
    if isinstance(node, exp.Cast):
        if node.to.is_type(*JSON_TYPES):
            parse = "try_parse_json" if isinstance(node, exp.TryCast) else "parse_json"
            return call(parse, node.this)
        if node.to.is_type(*exp.DataType.TEXT_TYPES):
            return call("to_json", node.this)
        return node
    path = _variant_path(node.expression)
    arguments = [node.this, exp.Literal.string(path)]
    if _EXTRACTS[type(node)]:
        arguments.append(exp.Literal.string("string"))
    return exp.func("try_variant_get", *arguments)


def _variant_path(path: exp.Expr) -> str:
    """A `->` operand (key or index) or a `#>` text-array path as a VARIANT path."""
    steps: list[str | int]
    if isinstance(path, exp.JSONPath):
        steps = []
        for part in path.expressions:
            if isinstance(part, exp.JSONPathKey):
                steps.append(str(part.this))
            elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
                steps.append(part.this)
            elif not isinstance(part, exp.JSONPathRoot):
                raise FeatureNotSupported(f"jsonb path {path.sql()} is not supported")
    elif isinstance(path, exp.Literal) and path.is_string:
        text = path.this.strip()
        if not (text.startswith("{") and text.endswith("}")):
            raise FeatureNotSupported(f"malformed jsonb path {text!r}: expected a text array such as '{{a,0}}'")
        steps = [int(s) if s.strip().isdigit() else s.strip() for s in text[1:-1].split(",") if s.strip()]
    else:
        raise FeatureNotSupported("jsonb keys and paths must be constants")
    return "$" + "".join(_path_step(step) for step in steps)


def _path_step(step: str | int) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    if _IDENTIFIER.fullmatch(step):
        return f".{step}"
    if '"' not in step:
        return f'["{step}"]'
    if "'" not in step:
        return f"['{step}']"
    raise FeatureNotSupported(f"jsonb key {step!r} has both kinds of quote")


def _typeof(value: exp.Expr) -> exp.Expr:
    schema = call("schema_of_variant", value)
    return exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null()),
            *(exp.If(this=kind_is(schema, prefix), true=exp.Literal.string(name)) for prefix, name in JSON_TYPEOF.items()),
        ],
        default=exp.Literal.string("number"),
    )
