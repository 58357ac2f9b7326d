"""Rule helper: the queries yielding a query's evaluation errors, one `message` column
holding each error's text, built from what the evaluation rule found in its SELECTs."""

from __future__ import annotations

from sqlglot import exp

from sluice.errors import InternalError
from sluice.lower.error_text import Err, first

MESSAGE = "message"

# What the evaluation rule finds per error kind of one SELECT: the select, the error per
# row or group, the error per join, and the select's clauses that pick those rows or groups.
Found = tuple[exp.Select, Err, list[Err], tuple[str, ...]]


def errors_query(select: exp.Select, err: Err, joins: list[Err], clauses: tuple[str, ...]) -> exp.Query:
    """`SELECT message FROM (<err per row or group of select>) WHERE message IS NOT NULL`,
    the rows or groups picked by the select's `clauses`."""
    rows = exp.Select()
    from_ = select.args.get("from_")
    if from_ is not None:
        rows.set("from_", from_.copy())
    copied = []
    for join, join_err in zip(select.args.get("joins") or [], joins):
        join = join.copy()
        if join_err is not None:
            # Pairs whose ON condition fails are rows of the errors query too.
            failed = exp.not_(exp.Is(this=join_err.copy(), expression=exp.Null()))
            join.set("on", exp.or_(exp.paren(join.args["on"]), failed))
        copied.append(join)
    rows.set("joins", copied or None)
    for clause in clauses:
        if select.args.get(clause) is not None:
            rows.set(clause, select.args[clause].copy())
    err = first([*joins, err])
    if err is None:
        raise InternalError.bug("an errors query of a select that cannot fail")
    rows.select(exp.alias_(err, MESSAGE), copy=False)
    query = messages(rows.subquery("errs"))
    ctes = [cte.copy() for cte in _visible_ctes(select)]
    if ctes:
        query.set("with_", exp.With(expressions=ctes))
    return query


def messages(rows: exp.Expr) -> exp.Select:
    """The errors among `rows`, a relation with a `message` column NULL where none."""
    return exp.select(MESSAGE).from_(rows).where(exp.column(MESSAGE).is_(exp.null()).not_())


def _visible_ctes(select: exp.Select) -> list[exp.CTE]:
    """The CTEs of every query enclosing `select`, outermost first."""
    ctes: list[exp.CTE] = []
    node: exp.Expr | None = select
    while node is not None:
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        if with_ is not None:
            ctes = list(with_.expressions) + ctes
        node = node.parent
    return ctes
