"""Rule: `x IN ()` is false and `x NOT IN ()` true, whatever `x` (SQLite's corpus asks for
it; Spark refuses the empty list)."""

from __future__ import annotations

from sqlglot import exp


def empty_in_lists(expression: exp.Expr) -> exp.Expr:
    """Each `IN` of an empty list in `expression` as FALSE, in place."""
    for node in list(expression.find_all(exp.In)):
        empty = not node.expressions and not node.args.get("unnest") and not node.args.get("field")
        if node.args.get("query") is None and empty:
            node.replace(exp.false())
    return expression
