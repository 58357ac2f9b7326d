"""Evaluation errors as data (DESIGN.md §4): what PostgreSQL would raise, found row by row.

Spark in ANSI mode raises on division by zero, integer overflow and failed casts, which
fails the whole job; PostgreSQL (and Materialize) report the row's error instead. `check`
rewrites a qualified, type-annotated query so that Spark never raises — each fallible
expression in a form that yields NULL (`NULLIF` divisors, `try_add`, `TRY_CAST`) — and
adds, per SELECT, queries that find the rows where PostgreSQL would have raised and
name the error: a column `message` holding `Evaluation error: division by zero`, etc.
The query's errs are those rows; when there are none, the NULLs never happened.

Errors are looked for where PostgreSQL evaluates: in the rows a WHERE keeps, in a CASE
branch only when it is taken, after COALESCE's earlier arguments were NULL, in AND/OR's
right side only when the left does not decide. In a grouped SELECT, aggregate arguments
and grouping keys are checked per input row, the rest per group. A correlated subquery
is left as it is (Spark cannot evaluate it apart from its outer row): if it fails on
Spark, `spark_error` gives the error PostgreSQL would have reported.

Errors are rare, and an errors query re-reads what its SELECT reads. So where the root
SELECT's rows are all read, it also carries a boolean column per errors query saying
which rows (or groups) it would find, and its WHERE and HAVING keep those rows: only when
one says so is the errors query run, to name the error (`Fusion`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

PREFIX = "Evaluation error: "
MESSAGE = "message"

_INTEGERS = {
    exp.DataType.Type.SMALLINT: "smallint",
    exp.DataType.Type.INT: "integer",
    exp.DataType.Type.BIGINT: "bigint",
}
# PostgreSQL's names of the types a text cast can fail to produce.
_PARSED = {
    **_INTEGERS,
    exp.DataType.Type.DECIMAL: "numeric",
    exp.DataType.Type.DOUBLE: "double precision",
    exp.DataType.Type.FLOAT: "real",
    exp.DataType.Type.BOOLEAN: "boolean",
    exp.DataType.Type.DATE: "date",
    exp.DataType.Type.TIMESTAMP: "timestamp",
    exp.DataType.Type.TIMESTAMPTZ: "timestamp with time zone",
    exp.DataType.Type.JSONB: "json",
}
_NUMBERS = {*_INTEGERS, exp.DataType.Type.DECIMAL, exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}
_TEXT = {*exp.DataType.TEXT_TYPES, exp.DataType.Type.UNKNOWN}
_SAFE_ARITHMETIC = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}

Err = exp.Expression | None


@dataclass
class Checked:
    """A query that never raises on Spark and the queries yielding its evaluation errors.

    Fused (see `Fusion`), the root SELECT also says in hidden boolean columns whether an
    errors query has rows: `flags[i]` names the column for `errors[i]` (None: only the
    query knows), and `carried` the input flag columns its rows carry on."""

    query: exp.Expression
    errors: list[exp.Query] = field(default_factory=list)
    flags: list[str | None] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)


@dataclass
class Fusion:
    """How the root SELECT of a query whose rows are all read reports its errors in the
    same pass: in a hidden boolean column per error kind (true on a row, or group, whose
    errors query would find it), so a query without errors runs once. `carried` maps a
    relation it reads to that relation's own flag columns, carried up when it is the
    SELECT's only input (no join can drop its failing rows)."""

    names: Iterator[str]
    carried: dict[str, list[str]] = field(default_factory=dict)


def check(query: exp.Expression, fusion: Fusion | None = None) -> Checked:
    """Rewrite a copy of `query` (qualified and type-annotated) as the module says."""
    query = query.copy()
    try:
        scopes = traverse_scope(query)
    except Exception:  # noqa: BLE001 - a shape sqlglot cannot scope: Spark's own errors remain
        return Checked(query)
    found: list[tuple[exp.Select, Err, list[Err], tuple[str, ...]]] = []
    root = None
    for scope in scopes:
        select = scope.expression
        if isinstance(select, exp.Select) and not scope.external_columns:
            checker = _Select(select)
            found.extend(checker.check())
            if select is query:
                root = checker
    errors = [_errors_query(*f) for f in found]
    errors += [q for values in list(query.find_all(exp.Values)) if (q := _values_errors(values))]
    flags: list[str | None] = [None] * len(errors)
    carried: list[str] = []
    if fusion is not None and root is not None and root.fusable(found):
        own = [i for i, f in enumerate(found) if f[0] is query]
        for i, name in zip(own, root.fuse([found[i] for i in own], fusion), strict=True):
            flags[i] = name
        carried = root.carry(fusion)
    return Checked(query, errors, flags, carried)


def text(message: str) -> exp.Expression:
    return exp.Literal.string(PREFIX + message)


def _first(errors: list[Err]) -> Err:
    present = [e for e in errors if e is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return exp.Coalesce(this=present[0], expressions=present[1:])


def _when(condition: exp.Expression, then: Err, otherwise: Err = None) -> Err:
    if then is None and otherwise is None:
        return None
    return exp.Case(
        ifs=[exp.If(this=condition, true=then if then is not None else exp.Null())], default=otherwise
    )


def _aggregates(nodes: list[exp.Expression]) -> list[exp.AggFunc]:
    """The aggregate calls among `nodes` (window functions and subqueries excluded)."""
    found = []
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
        self.keys: list[tuple[exp.Expression, exp.Expression]] = []  # (as written, made safe)
        self.grouped = False

    def check(self) -> list[tuple[exp.Select, Err, list[Err], tuple[str, ...]]]:
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
            row = _first([self.expression(o) for o in outputs] + self.ordering(ordered))
        else:
            written = [k.copy() for k in group.expressions] if group is not None else []
            keys = [self.expression(k) for k in (group.expressions if group is not None else [])]
            row = _first(keys + [self.expression(a) for agg in aggregates for a in list(agg.iter_expressions())])
        if where is not None and where_err is None and not any(joins):
            # A WHERE that cannot fail picks the rows to check as it picks the rows, so
            # Spark plans its equalities as joins, not a product of the tables.
            rows = [(select, row, joins, ("where",))] if row is not None else []
        else:
            row = _first([where_err, self.kept(where, row)])
            rows = [(select, row, joins, ())] if row is not None or any(joins) else []
        if not grouped:
            return rows
        self.opaque_aggregates = True
        self.keys = list(zip(written, group.expressions)) if group is not None else []
        having_err = self.expression(having.this) if having is not None else None
        per_group = [self.expression(o) for o in outputs] + self.ordering(ordered)
        group_err = _first([having_err, self.kept(having, _first(per_group))])
        if group_err is None:
            return rows
        return rows + [(select, group_err, [None] * len(joins), ("where", "group"))]

    def fusable(self, found: list[tuple[exp.Select, Err, list[Err], tuple[str, ...]]]) -> bool:
        """Whether every row or group this SELECT makes is read (no LIMIT, OFFSET or
        FETCH) and no join of it can fail (a pair whose ON fails is not joined to be seen)."""
        if any(self.select.args.get(k) is not None for k in ("limit", "offset", "fetch")):
            return False
        return all(j is None for f in found if f[0] is self.select for j in f[2])

    def fuse(self, entries: list[tuple[exp.Select, Err, list[Err], tuple[str, ...]]], fusion: Fusion) -> list[str]:
        """Flag columns for this SELECT's own errors (`check`'s entries for it)."""
        names = []
        for _, err, _, clauses in entries:
            names.append(next(fusion.names))
            failed = exp.not_(exp.Is(this=err.copy(), expression=exp.Null()))
            self.report(failed, names[-1], per_row="group" not in clauses, widen_where="where" not in clauses)
        return names

    def carry(self, fusion: Fusion) -> list[str]:
        """The flag columns of this SELECT's only input, carried on in its own rows."""
        from_ = self.select.args.get("from_")
        if self.select.args.get("joins") or from_ is None or not isinstance(from_.this, exp.Table):
            return []
        table = from_.this
        flags = fusion.carried.get(table.name, [])
        for flag in flags:
            self.report(exp.column(flag, table=table.alias_or_name), flag, per_row=True, widen_where=True)
        return flags

    def report(self, failed: exp.Expression, name: str, per_row: bool, widen_where: bool) -> None:
        """Add column `name`: whether a row (or, grouped, a group) has `failed`. Rows and
        groups it marks are kept by the WHERE and HAVING, so the flag reaches the result."""
        if widen_where:
            self.widen("where", failed)
        if per_row and self.grouped:
            failed = exp.Max(this=failed.copy())
        if self.grouped:
            self.widen("having", failed)
        self.select.select(exp.alias_(failed.copy(), name), append=True, copy=False)

    def widen(self, clause: str, condition: exp.Expression) -> None:
        node = self.select.args.get(clause)
        if node is not None:
            node.set("this", exp.or_(exp.paren(node.this), condition.copy()))

    @staticmethod
    def kept(clause: exp.Expression | None, err: Err) -> Err:
        """`err` for the rows a WHERE/HAVING keeps."""
        if clause is None or err is None:
            return err
        return _when(clause.this.copy(), err)

    def ordering(self, ordered: list[exp.Expression]) -> list[Err]:
        """ORDER BY errors, where the errors query can name every column they read (an
        output alias it cannot)."""
        errors = [self.expression(o) for o in ordered]
        return [e for e in errors if e is None or all(c.table for c in e.find_all(exp.Column))]

    def expression(self, node: exp.Expression | None) -> Err:
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
            return _first([left, _when(decided, None, right)])
        errors = [self.expression(child) for child in list(node.iter_expressions())]
        return _first(errors + [_own(node)])

    def case(self, node: exp.Case) -> Err:
        subject_err = self.expression(node.args.get("this"))
        arms = [(self.expression(arm.this), self.expression(arm.args.get("true"))) for arm in node.args["ifs"]]
        result = self.expression(node.args.get("default"))
        subject = node.args.get("this")
        for arm, (condition_err, value_err) in reversed(list(zip(node.args["ifs"], arms))):
            condition = arm.this.copy()
            if subject is not None:
                condition = exp.EQ(this=subject.copy(), expression=condition)
            result = _first([condition_err, _when(condition, value_err, result)])
        return _first([subject_err, result])

    def coalesce(self, node: exp.Coalesce) -> Err:
        errors = [self.expression(a) for a in [node.this, *node.expressions]]
        arguments = [node.this, *node.expressions]
        result = errors[-1]
        for argument, err in reversed(list(zip(arguments[:-1], errors[:-1]))):
            result = _first([err, _when(exp.Is(this=argument.copy(), expression=exp.Null()), result)])
        return result


def _own(node: exp.Expression) -> Err:
    """The error `node` itself can raise (its operands already safe), rewriting it into
    the form that yields NULL instead."""
    if isinstance(node, (exp.Div, exp.Mod, exp.IntDiv)):
        divisor = node.expression
        if isinstance(divisor, exp.Literal) and divisor.is_number and float(divisor.this) != 0:
            return None
        # Division is strict: a NULL dividend gives NULL, even over zero.
        zero = exp.and_(
            exp.EQ(this=divisor.copy(), expression=exp.Literal.number(0)),
            exp.not_(exp.Is(this=node.this.copy(), expression=exp.Null())),
        )
        err = _when(zero, text("division by zero"))
        safe_divisor = exp.Nullif(this=divisor, expression=exp.Literal.number(0))
        safe_divisor.type = divisor.type
        node.set("expression", safe_divisor)
        return err
    if type(node) in _SAFE_ARITHMETIC:
        return _overflow(node)
    if type(node) is exp.Cast:
        return _cast(node)
    return None


def _overflow(node: exp.Binary) -> Err:
    left, right = node.this, node.expression
    if not all(o.is_type(*_INTEGERS) for o in (left, right)):
        return None
    # The wider operand's type, as in PostgreSQL (and Spark).
    result = max((_integer_type(left), _integer_type(right)), key=list(_INTEGERS).index)
    safe = exp.Anonymous(this=_SAFE_ARITHMETIC[type(node)], expressions=[left, right])
    safe.type = node.type
    node.replace(safe)
    happened = exp.and_(
        exp.Is(this=safe.copy(), expression=exp.Null()),
        exp.not_(exp.Is(this=left.copy(), expression=exp.Null())),
        exp.not_(exp.Is(this=right.copy(), expression=exp.Null())),
    )
    return _when(happened, text(f"{_INTEGERS[result]} out of range"))


def _integer_type(node: exp.Expression) -> exp.DataType.Type:
    """An integer operand's type; a literal's from its value (sqlglot calls them all INT)."""
    if isinstance(node, exp.Literal) and node.is_int and abs(int(node.this)) > 2**31 - 1:
        return exp.DataType.Type.BIGINT
    return node.type.this


def _cast(node: exp.Cast) -> Err:
    target, value = node.to, node.this
    source = value.type.this if value.type is not None else exp.DataType.Type.UNKNOWN
    if target.this not in _PARSED or source == target.this:
        return None
    if source in _TEXT:
        message = _syntax_message(value, target.this)
    elif source in _NUMBERS and target.this in _INTEGERS:
        message = text(f"{_INTEGERS[target.this]} out of range")
    else:
        return None
    safe = exp.TryCast(this=value, to=target, safe=True)
    safe.type = node.type
    node.replace(safe)
    failed = exp.and_(
        exp.not_(exp.Is(this=value.copy(), expression=exp.Null())),
        exp.Is(this=safe.copy(), expression=exp.Null()),
    )
    return _when(failed, message)


def _syntax_message(value: exp.Expression, target: exp.DataType.Type) -> exp.Expression:
    """PostgreSQL's complaint about text that is not a `target`: out of range for an
    integer that does not fit, invalid input syntax otherwise."""
    name = _PARSED[target]
    if target == exp.DataType.Type.JSONB:  # PostgreSQL puts the culprit in a DETAIL
        return text(f"invalid input syntax for type {name}")
    shown = exp.cast(value.copy(), exp.DataType.Type.TEXT)
    syntax = exp.func(
        "concat", text(f"invalid input syntax for type {name}: \""), shown, exp.Literal.string('"')
    )
    if target not in _INTEGERS:
        return syntax
    in_range = exp.func(
        "concat", text('value "'), shown.copy(), exp.Literal.string(f'" is out of range for type {name}')
    )
    integral = exp.RegexpLike(this=shown.copy(), expression=exp.Literal.string(r"^\s*[+-]?[0-9]+\s*$"))
    return exp.Case(ifs=[exp.If(this=integral, true=in_range)], default=syntax)


def _errors_query(select: exp.Select, err: Err, joins: list[Err], clauses: tuple[str, ...]) -> exp.Query:
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
    err = _first([*joins, err])
    rows.select(exp.alias_(err, MESSAGE), copy=False)
    query = exp.select(MESSAGE).from_(rows.subquery("errs")).where(exp.column(MESSAGE).is_(exp.null()).not_())
    ctes = [cte.copy() for cte in _visible_ctes(select)]
    if ctes:
        query.set("with_", exp.With(expressions=ctes))
    return query


def _visible_ctes(select: exp.Select) -> list[exp.CTE]:
    """The CTEs of every query enclosing `select`, outermost first."""
    ctes: list[exp.CTE] = []
    node = select
    while node is not None:
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        if with_ is not None:
            ctes = list(with_.expressions) + ctes
        node = node.parent
    return ctes


def _values_errors(values: exp.Values) -> exp.Query | None:
    """The errors of a VALUES list's rows."""
    checker = _Select(exp.Select())
    errors = []
    for row in values.expressions:
        err = _first([checker.expression(v) for v in list(row.expressions)])
        errors.append(err)
    if all(e is None for e in errors):
        return None
    rows = exp.Values(
        expressions=[exp.Tuple(expressions=[e if e is not None else exp.Null()]) for e in errors],
        alias=exp.TableAlias(this=exp.to_identifier("errs"), columns=[exp.to_identifier(MESSAGE)]),
    )
    return exp.select(MESSAGE).from_(rows).where(exp.column(MESSAGE).is_(exp.null()).not_())


_SPARK_TYPES = {
    "SMALLINT": "smallint",
    "INT": "integer",
    "BIGINT": "bigint",
    "DOUBLE": "double precision",
    "FLOAT": "real",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
}
_CONDITION = re.compile(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\]")


def spark_error(error: Exception) -> str | None:
    """The evaluation error PostgreSQL would have reported where Spark raised instead
    (what `check` leaves to Spark: correlated subqueries, subqueries yielding many rows),
    or None when the failure is no evaluation error."""
    condition = getattr(error, "getCondition", lambda: None)()
    parameters = getattr(error, "getMessageParameters", lambda: None)() or {}
    if condition is None:  # raised by the JVM outside Spark's error framework
        match = _CONDITION.search(str(error))
        condition = match.group(1) if match else None
    target = parameters.get("targetType", "").strip('"')
    name = "numeric" if target.startswith("DECIMAL") else _SPARK_TYPES.get(target, target.lower())
    if condition in ("DIVIDE_BY_ZERO", "INTERVAL_DIVIDED_BY_ZERO"):
        message = "division by zero"
    elif condition == "ARITHMETIC_OVERFLOW":
        message = "value out of range: overflow"
    elif condition == "CAST_OVERFLOW":
        message = f"{name} out of range"
    elif condition == "CAST_INVALID_INPUT":
        value = parameters.get("expression", "")
        if value.startswith("'") and value.endswith("'"):
            value = value[1:-1].replace("''", "'")
        message = f'invalid input syntax for type {name}: "{value}"'
    elif condition == "SCALAR_SUBQUERY_TOO_MANY_ROWS":
        message = "more than one row returned by a subquery used as an expression"
    else:
        return None
    return PREFIX + message
