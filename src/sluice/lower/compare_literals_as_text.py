"""Rule: a text or bytea literal IN a subquery of numbers compares as text: no match, where
Spark would fail casting the literal to a number (as SQLite's corpus expects)."""

from __future__ import annotations

from sqlglot import exp


def compare_literals_as_text(expression: exp.Expr) -> exp.Expr:
    """Each `'literal' IN (SELECT number …)` in `expression` as a comparison of texts
    (both sides cast to TEXT), in place, innermost first."""
    for node in reversed(list(expression.find_all(exp.In))):
        if node.args.get("query") is not None:
            _compare_as_text(node)
    return expression


def _compare_as_text(node: exp.In) -> None:
    subquery = node.args["query"]
    query = subquery.this if isinstance(subquery, exp.Subquery) else subquery
    literal = isinstance(node.this, exp.HexString) or (isinstance(node.this, exp.Literal) and node.this.is_string)
    if not literal or not isinstance(query, exp.Select) or len(query.selects) != 1:
        return
    output = query.selects[0]
    value = output.this if isinstance(output, exp.Alias) else output
    if value.is_type(*exp.DataType.NUMERIC_TYPES):
        node.set("this", exp.cast(node.this, exp.DataType.Type.TEXT))
        value.replace(exp.cast(value.copy(), exp.DataType.Type.TEXT))
