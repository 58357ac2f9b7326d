"""Rule: `r IS NULL` and `r IS NOT NULL` of a record as PostgreSQL tests them: IS NULL
holds for a NULL record and for one whose fields are all NULL, IS NOT NULL only when the
record and every field are non-NULL (so a record can be neither). `NOT (r IS NULL)` is
the negation of the first, as in PostgreSQL."""

from __future__ import annotations

from sqlglot import exp


def record_is_null(expression: exp.Expr) -> exp.Expr:
    """Every null test of a record in the type-annotated `expression` as tests of its
    fields, in place, innermost first."""
    for test in reversed(list(expression.find_all(exp.Is))):
        value = test.this
        if not isinstance(test.expression, exp.Null) or not value.is_type(exp.DataType.Type.STRUCT):
            continue
        fields = [
            exp.Dot(this=value.copy(), expression=exp.to_identifier(f.name, quoted=True))
            for f in value.type.expressions
        ]
        checks: list[exp.Expr]
        if isinstance(test.parent, exp.Not):  # `r IS NOT NULL`; `NOT (r IS NULL)` has a Paren between
            checks = [exp.not_(exp.Is(this=v, expression=exp.Null())) for v in [value.copy(), *fields]]
            test.parent.replace(exp.paren(exp.and_(*checks)))
        else:
            checks = [exp.Is(this=v, expression=exp.Null()) for v in fields]
            whole = exp.Is(this=value.copy(), expression=exp.Null())
            test.replace(exp.paren(exp.or_(whole, exp.and_(*checks)) if checks else whole))
    return expression
