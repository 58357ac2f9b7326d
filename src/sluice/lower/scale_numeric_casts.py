"""Rule: an unconstrained `numeric` cast keeps fractional digits (ten: the scale tables
store numeric with), where Spark's bare DECIMAL would round to an integer."""

from __future__ import annotations

from sqlglot import exp


def scale_numeric_casts(expression: exp.Expr) -> exp.Expr:
    """Every cast to a `numeric` without precision in `expression` as one to
    DECIMAL(38, 10), in place."""
    for cast in expression.find_all(exp.Cast):
        if cast.to.is_type(exp.DataType.Type.DECIMAL) and not cast.to.expressions:
            cast.set("to", exp.DataType.build("DECIMAL(38, 10)"))
    return expression
