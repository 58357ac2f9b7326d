"""Rule: each catalog relation a query reads, named as the Spark view that holds its rows
(the renderer registers one per relation read: a source's oks or errs, a table, a view)."""

from __future__ import annotations

from sqlglot import exp


def name_relations(expression: exp.Expr, relations: dict[str, str]) -> exp.Expr:
    """Each table of `expression` that `relations` names (by catalog name, or `only
    errors(name)` for a source read ONLY ERRORS) renamed to its view, in place. An IGNORE /
    ONLY ERRORS modifier the tree may still carry is no SQL: Spark SQL never shows it."""
    for table in expression.find_all(exp.Table):
        if table.name in relations:
            table.set("this", exp.to_identifier(relations[table.name]))
    return expression
