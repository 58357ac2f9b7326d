"""Rule: evaluation errors as data (DESIGN.md §4) — what PostgreSQL would raise, found row
by row.

Spark in ANSI mode raises on division by zero, integer overflow and failed casts, which
fails the whole job; PostgreSQL (and Materialize) report the row's error instead.
`check_evaluation` rewrites a qualified, type-annotated query so that Spark never raises
— each fallible expression in a form that yields NULL (`fallible`) — and adds, per
SELECT, queries that find the rows where PostgreSQL would have raised and name the error:
a column `message` holding `Evaluation error: division by zero`, etc. (`errors_queries`).
The query's errs are those rows; when there are none, the NULLs never happened.

Errors are looked for where PostgreSQL evaluates: in the rows a WHERE keeps, in a CASE
branch only when it is taken, after COALESCE's earlier arguments were NULL, in AND/OR's
right side only when the left does not decide. In a grouped SELECT, aggregate arguments
and grouping keys are checked per input row, the rest per group. A correlated subquery
is left as it is (Spark cannot evaluate it apart from its outer row): if it fails on
Spark, `spark/conditions.py` gives the error PostgreSQL would have reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from sluice.lower.error_text import Err, first, when
from sluice.lower.errors_queries import MESSAGE, Found, errors_query, messages
from sluice.lower.fallible import make_safe
from sluice.lower.fusion import Fusion, carry, fusable, fuse


@dataclass
class Checked:
    """A query that never raises on Spark and the queries yielding its evaluation errors.

    Fused (see `fusion`), the root SELECT also says in hidden boolean columns whether an
    errors query has rows: `flags[i]` names the column for `errors[i]` (None: only the
    query knows), and `carried` the input flag columns its rows carry on."""

    query: exp.Expr
    errors: list[exp.Query] = field(default_factory=list)
    flags: list[str | None] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)


def check_evaluation(query: exp.Expr, fusion: Fusion | None = None) -> Checked:
    """Rewrite `query` (qualified and type-annotated) in place as the module says; with
    `fusion`, its root SELECT also flags its errors in its own rows."""
    try:
        scopes = traverse_scope(query)
    except Exception:  # noqa: BLE001 - a shape sqlglot cannot scope: Spark's own errors remain
        return Checked(query)
    found: list[Found] = []
    root = None
    for scope in scopes:
        select = scope.expression
        if isinstance(select, exp.Select) and not scope.external_columns:
            checker = _Select(select)
            found.extend(checker.check())
            if select is query:
                root = checker
    errors = [errors_query(*f) for f in found]
    errors += [q for values in list(query.find_all(exp.Values)) if (q := _values_errors(values))]
    flags: list[str | None] = [None] * len(errors)
    carried: list[str] = []
    if fusion is not None and root is not None and fusable(root.select, found):  # root.select is query
        own = [i for i, f in enumerate(found) if f[0] is query]
        for i, name in zip(own, fuse(root.select, root.grouped, [found[i] for i in own], fusion), strict=True):
            flags[i] = name
        carried = carry(root.select, root.grouped, fusion)
    return Checked(query, errors, flags, carried)


def _aggregates(nodes: list[exp.Expr]) -> list[exp.AggFunc]:
    """The aggregate calls among `nodes` (window functions and subqueries excluded)."""
    found: list[exp.AggFunc] = []
    for node in nodes:
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, exp.AggFunc) and not isinstance(current.parent, exp.Window):
                found.append(current)
                continue
            if isinstance(current, (exp.Query, exp.Subquery, exp.Window)):
                continue
            stack.extend(current.iter_expressions())
    return found


class _Select:
    """One SELECT: its fallible expressions made safe in place, and its errors."""

    def __init__(self, select: exp.Select) -> None:
        self.select = select
        # Per group, aggregates and grouping keys are values computed (and checked) per row.
        self.opaque_aggregates = False
        self.keys: list[tuple[exp.Expr, exp.Expr]] = []  # (as written, made safe)
        self.grouped = False

    def check(self) -> list[Found]:
        """(select, error per row or group, errors per join, the select's clauses that
        pick those rows or groups) for each error kind."""
        select = self.select
        joins = [self.expression(j.args.get("on")) for j in select.args.get("joins") or []]
        where = select.args.get("where")
        where_err = self.expression(where.this) if where is not None else None
        outputs = list(select.expressions)
        order = select.args.get("order")
        ordered = [o.this for o in order.expressions] if order is not None else []
        having = select.args.get("having")
        group = select.args.get("group")
        aggregates = _aggregates(outputs + ordered + ([having.this] if having is not None else []))
        grouped = self.grouped = group is not None or bool(aggregates)
        if not grouped:
            row = first([self.expression(o) for o in outputs] + self.ordering(ordered))
        else:
            written = [k.copy() for k in group.expressions] if group is not None else []
            keys = [self.expression(k) for k in (group.expressions if group is not None else [])]
            row = first(keys + [self.expression(a) for agg in aggregates for a in list(agg.iter_expressions())])
        rows: list[Found]
        if where is not None and where_err is None and not any(joins):
            # A WHERE that cannot fail picks the rows to check as it picks the rows, so
            # Spark plans its equalities as joins, not a product of the tables.
            rows = [(select, row, joins, ("where",))] if row is not None else []
        else:
            row = first([where_err, self.kept(where, row)])
            rows = [(select, row, joins, ())] if row is not None or any(joins) else []
        if not grouped:
            return rows
        self.opaque_aggregates = True
        self.keys = list(zip(written, group.expressions)) if group is not None else []
        having_err = self.expression(having.this) if having is not None else None
        per_group = [self.expression(o) for o in outputs] + self.ordering(ordered)
        group_err = first([having_err, self.kept(having, first(per_group))])
        if group_err is None:
            return rows
        return rows + [(select, group_err, [None] * len(joins), ("where", "group"))]

    @staticmethod
    def kept(clause: exp.Expr | None, err: Err) -> Err:
        """`err` for the rows a WHERE/HAVING keeps."""
        if clause is None or err is None:
            return err
        return when(clause.this.copy(), err)

    def ordering(self, ordered: list[exp.Expr]) -> list[Err]:
        """ORDER BY errors, where the errors query can name every column they read (an
        output alias it cannot)."""
        errors = [self.expression(o) for o in ordered]
        return [e for e in errors if e is None or all(c.table for c in e.find_all(exp.Column))]

    def expression(self, node: exp.Expr | None) -> Err:
        """Make `node` safe in place; the expression giving its error text, or None."""
        if node is None or isinstance(node, (exp.Query, exp.Subquery)):
            return None
        if self.opaque_aggregates:
            if isinstance(node, exp.AggFunc) and not isinstance(node.parent, exp.Window):
                return None
            key = next((safe for written, safe in self.keys if written == node), None)
            if key is not None:  # the group's key, as the GROUP BY computes it
                node.replace(key.copy())
                return None
        if isinstance(node, exp.Case):
            return self.case(node)
        if isinstance(node, exp.Coalesce):
            return self.coalesce(node)
        if isinstance(node, (exp.And, exp.Or)):
            left, right = self.expression(node.this), self.expression(node.expression)
            decided = exp.not_(node.this.copy()) if isinstance(node, exp.And) else node.this.copy()
            return first([left, when(decided, None, right)])
        errors = [self.expression(child) for child in list(node.iter_expressions())]
        return first(errors + [make_safe(node)])

    def case(self, node: exp.Case) -> Err:
        subject_err = self.expression(node.args.get("this"))
        arms = [(self.expression(arm.this), self.expression(arm.args.get("true"))) for arm in node.args["ifs"]]
        result = self.expression(node.args.get("default"))
        subject = node.args.get("this")
        for arm, (condition_err, value_err) in reversed(list(zip(node.args["ifs"], arms))):
            condition = arm.this.copy()
            if subject is not None:
                condition = exp.EQ(this=subject.copy(), expression=condition)
            result = first([condition_err, when(condition, value_err, result)])
        return first([subject_err, result])

    def coalesce(self, node: exp.Coalesce) -> Err:
        errors = [self.expression(a) for a in [node.this, *node.expressions]]
        arguments = [node.this, *node.expressions]
        result = errors[-1]
        for argument, err in reversed(list(zip(arguments[:-1], errors[:-1]))):
            result = first([err, when(exp.Is(this=argument.copy(), expression=exp.Null()), result)])
        return result


def _values_errors(values: exp.Values) -> exp.Query | None:
    """The errors of a VALUES list's rows."""
    checker = _Select(exp.Select())
    errors = []
    for row in values.expressions:
        err = first([checker.expression(v) for v in list(row.expressions)])
        errors.append(err)
    if all(e is None for e in errors):
        return None
    rows = exp.Values(
        expressions=[exp.Tuple(expressions=[e if e is not None else exp.Null()]) for e in errors],
        alias=exp.TableAlias(this=exp.to_identifier("errs"), columns=[exp.to_identifier(MESSAGE)]),
    )
    return messages(rows)
