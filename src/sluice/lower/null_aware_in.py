"""Rule: `x IN (SELECT …)` with PostgreSQL's three-valued answer (DESIGN.md §8).

`x IN (SELECT …)` is NULL, not false, when nothing matches and the subquery yields a
NULL (or `x` is NULL and the subquery yields rows); `NOT IN` follows. Spark answers
false, so the three-valued answer is compiled out of `IN` and `EXISTS`, except where
only truth matters (a WHERE, HAVING, ON or WHEN condition, under ANDs and ORs only:
there a NULL operand decides exactly as false would).
"""

from __future__ import annotations

from sqlglot import exp

_TRUTH_ONLY = (exp.Where, exp.Having)


def null_aware_in(expression: exp.Expr) -> exp.Expr:
    """Each `IN (subquery)` of `expression` whose NULL counts, as a CASE over Spark's
    two-valued IN and EXISTS, in place. Innermost first: an outer IN's rewrite copies its
    subquery, inner INs included."""
    for node in reversed(list(expression.find_all(exp.In))):
        if node.args.get("query") is not None and not _truth_only(node):
            node.replace(_null_aware(node))
    return expression


def _truth_only(node: exp.Expr) -> bool:
    """Whether only the truth of `node` counts: NULL and false both reject the row."""
    while True:
        parent = node.parent
        if isinstance(parent, (exp.And, exp.Or, exp.Paren)):
            node = parent
        elif isinstance(parent, _TRUTH_ONLY):
            return True
        elif isinstance(parent, exp.Join):
            return node.arg_key == "on"
        elif isinstance(parent, exp.If):
            return node.arg_key == "this"
        else:
            return False


def _null_aware(node: exp.In) -> exp.Expr:
    """`x IN (q)` with PostgreSQL's NULLs, from Spark's two-valued IN and EXISTS."""
    subquery = node.args["query"]
    query = subquery.this if isinstance(subquery, exp.Subquery) else subquery
    value = node.this
    some_null = _with_null(query)

    def exists(q: exp.Expr) -> exp.Exists:
        return exp.Exists(this=q.copy())

    return exp.Case(
        ifs=[
            exp.If(this=node.copy(), true=exp.true()),
            exp.If(this=exp.not_(exists(query)), true=exp.false()),
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null()),
            exp.If(this=exists(some_null), true=exp.Null()),
        ],
        default=exp.false(),
    )


def _with_null(query: exp.Query) -> exp.Query:
    """The rows of a one-column query whose value is NULL."""
    output = query.selects[0] if query.selects else None
    if output is None:
        name = "_col_0"
    elif (
        isinstance(query, exp.Select)
        and not any(query.args.get(k) for k in ("limit", "offset", "fetch", "group", "having"))
        and not output.find(exp.AggFunc, exp.Window)
    ):
        value = output.this if isinstance(output, exp.Alias) else output
        return query.copy().where(exp.Is(this=value.copy(), expression=exp.Null()), copy=False)
    else:
        name = output.alias_or_name
    return (
        exp.select(exp.Literal.number(1))
        .from_(query.copy().subquery("q"))
        .where(exp.Is(this=exp.column(name, "q"), expression=exp.Null()))
    )
