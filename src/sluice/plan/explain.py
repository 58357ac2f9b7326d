"""EXPLAIN's optimized plan: a planned query as an operator tree in Materialize's text form.

The tree is the query's own shape, read from its qualified sqlglot tree: `Get` for what it
reads, `Filter`, `Map`, `Project`, `Reduce`, `Distinct`, `Join`/`CrossJoin` (and the raw
plan's `LeftOuterJoin`, … for outer joins), `Union`, `Threshold`/`Negate` for EXCEPT,
`TopK`, `Finish`, `Constant`, and `With`/`cte` for CTEs, subqueries and the views the query
evaluates. Columns are numbered from 0 as `#n` (`#^n` in a correlated subquery: a column
of the query around it). Beside each `Get` of a source is what happens to its errors; under
the tree, each view says whether it is maintained or evaluated at read time, and why.

It is what sluice hands Spark, before Spark's optimizer: Spark's own plan is EXPLAIN
PHYSICAL PLAN's. Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import FeatureNotSupported, InternalError
from sluice.plan.plans import QueryPlan, Read
from sluice.plan.queries import READ_ERRORS
from sluice.syntax.query import Sluice

SCHEMA = "materialize.public"
HUMANIZED = "humanized expressions"

# Why a view is evaluated by each query that reads it rather than maintained (DESIGN §10).
READ_TIME = {
    kinds.VIEW: "evaluated at read time (a view is not stored: each query that reads it evaluates it)",
    kinds.MATERIALIZED_VIEW: (
        "evaluated at read time (sluice does not maintain materialized views incrementally yet: "
        "each query that reads it evaluates it over what its sources have committed)"
    ),
}


@dataclass
class Node:
    """One operator: its text, its inputs, and a note shown beside it (`// { … }`)."""

    text: str
    inputs: list[Node] = field(default_factory=list)
    note: str | None = None
    rows: list[str] = field(default_factory=list)  # a Constant's

    def lines(self, depth: int) -> list[str]:
        pad = "  " * depth
        note = f" // {{ {self.note} }}" if self.note else ""
        out = [f"{pad}{self.text}{note}"]
        out += [f"{pad}  - {row}" for row in self.rows]
        for node in self.inputs:
            out += node.lines(depth + 1)
        return out


@dataclass(frozen=True)
class Col:
    """A column of an operator's output: the relation (alias) it comes from, its name."""

    qualifier: str | None
    name: str


@dataclass
class Relation:
    node: Node
    columns: list[Col]


@dataclass
class Cte:
    label: str  # `l0`
    shown: str  # `[l0 as x]`
    node: Node
    columns: list[str]


class PlanWriter:
    """Writes the optimized plan of queries over `catalog`'s relations."""

    def __init__(self, catalog: Catalog, humanized: bool = False) -> None:
        self.catalog = catalog
        self.humanized = humanized
        self.ctes: list[Cte] = []
        self.views: dict[str, Cte] = {}  # item id → its cte
        self.scopes: list[list[Col]] = []  # the queries around a subquery, innermost last
        self.named: list[dict[str, Cte]] = [{}]  # CTE names in scope
        self.subqueries = 0
        self._reads: dict[str, Read] = {}  # every relation the explained query reads, views' too

    # ------------------------------------------------------------ whole plans

    def explain(self, header: str, plan: QueryPlan, item: Item | None = None) -> list[str]:
        """The plan of `plan` under `header` (`Explained Query`, or the view's name), then
        how each view it evaluates is kept (`item`: the explained view itself)."""
        self._reads = {r.item_id: r for r in _all_reads(plan)}
        root = self.query(plan, top=True)
        lines = [f"{header}:"]
        if self.ctes:
            lines.append("  With")
            for cte in self.ctes:
                lines.append(f"    cte {cte.shown} =")
                lines += cte.node.lines(3)
            lines.append("  Return")
            lines += root.node.lines(2)
        else:
            lines += root.node.lines(1)
        viewed = [item] if item is not None and item.kind in READ_TIME else []
        viewed += [self.catalog.by_id(i) for i in self.views]
        if viewed:
            lines.append("Views:")
            lines += [f"  - {SCHEMA}.{v.name}: {READ_TIME[v.kind]}" for v in viewed]
        return lines

    def query(self, plan: QueryPlan, top: bool = False) -> Relation:
        if plan.expression is None:  # a relation read whole (SUBSCRIBE x, a sink's)
            (read,) = plan.reads
            item = self.catalog.by_id(read.item_id)
            return self.get(item, read.errors, item.name)
        return self.relation(plan.expression, top)

    # ------------------------------------------------------------ relations

    def relation(self, query: exp.Expr, top: bool = False) -> Relation:
        with_ = query.args.get("with_") or query.args.get("with")
        if with_ is not None:
            self.named.append(dict(self.named[-1]))
            for cte in with_.expressions:
                inner = self.relation(cte.this)
                self.named[-1][cte.alias] = self._cte(cte.alias, inner.node, [c.name for c in inner.columns])
        try:
            if isinstance(query, exp.Select):
                return self.select(query, top)
            if isinstance(query, exp.SetOperation):
                return self.set_operation(query, top)
            if isinstance(query, exp.Subquery):
                return self.relation(query.this, top)
            if isinstance(query, exp.Values):
                return self.values(query)
        finally:
            if with_ is not None:
                self.named.pop()
        raise _unsupported(query)

    def set_operation(self, query: exp.SetOperation, top: bool) -> Relation:
        left, right = self.relation(query.this), self.relation(query.expression)
        columns = [Col(None, c.name) for c in left.columns]
        every = self._list(range(len(columns)), columns)
        distinct = bool(query.args.get("distinct"))
        if isinstance(query, exp.Union):
            inputs = []
            for side in (left, right):  # UNION ALL chains are one Union, as Materialize shows them
                inputs += side.node.inputs if side.node.text == "Union" else [side.node]
            node = Node("Union", inputs)
            if distinct:
                node = Node(f"Distinct group_by=[{every}]", [node])
        elif isinstance(query, exp.Except):
            lhs, rhs = left.node, right.node
            if distinct:
                lhs, rhs = Node(f"Distinct group_by=[{every}]", [lhs]), Node(f"Distinct group_by=[{every}]", [rhs])
            node = Node("Threshold", [Node("Union", [lhs, Node("Negate", [rhs])])])
        else:
            node = Node("Intersect" if distinct else "IntersectAll", [left.node, right.node])
        order = query.args.get("order")
        orders = [(_output_index(o.this, columns), o) for o in order.expressions] if order is not None else []
        return self._finish(Relation(node, columns), orders, list(range(len(columns))), query, top, columns)

    def values(self, values: exp.Values) -> Relation:
        rows = [self.scalar(row, []) for row in values.expressions]
        alias = values.args.get("alias")
        names = [c.name for c in alias.columns] if alias is not None and alias.columns else [
            f"column{i + 1}" for i in range(len(values.expressions[0].expressions))
        ]
        qualifier = alias.name if alias is not None else None
        return Relation(Node("Constant", rows=rows), [Col(qualifier, n) for n in names])

    def select(self, select: exp.Select, top: bool) -> Relation:
        relation = self.from_clause(select)
        scope = relation.columns
        where = select.args.get("where")
        if where is not None:
            relation = Relation(Node(f"Filter {self.predicate(where.this, scope)}", [relation.node]), scope)
        outputs = [e.this if isinstance(e, exp.Alias) else e for e in select.expressions]
        names = [e.alias_or_name for e in select.expressions]
        order = select.args.get("order")
        ordered = list(order.expressions) if order is not None else []
        having = select.args.get("having")
        group = select.args.get("group")
        keys = list(group.expressions) if group is not None else []
        for key in keys:
            if isinstance(key, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                raise _unsupported(key)
        aggregates = _aggregates([*outputs, *(o.this for o in ordered), *([having.this] if having else [])])
        replaced: dict[str, int] = {}
        if keys or aggregates:
            texts = [self.scalar(k, scope) for k in keys]
            calls = [self.scalar(a, scope) for a in aggregates]
            parts = ([f"group_by=[{', '.join(texts)}]"] if keys else []) + (
                [f"aggregates=[{', '.join(calls)}]"] if aggregates else []
            )
            node = Node(f"Reduce {' '.join(parts)}", [relation.node])
            reduced = [*keys, *aggregates]
            replaced = {_key(e): i for i, e in enumerate(reduced)}
            scope = [
                scope[index]
                if isinstance(e, exp.Column) and (index := self._index(e, scope)) is not None
                else Col(None, e.sql(dialect=Sluice))
                for e in reduced
            ]
            relation = Relation(node, scope)
            if having is not None:
                text = self.predicate(having.this, scope, replaced)
                relation = Relation(Node(f"Filter {text}", [relation.node]), scope)
        # Outputs and sort keys that are not columns already are computed by one Map.
        mapped: list[str] = []
        columns = list(scope)

        def place(expression: exp.Expr, name: str) -> int:
            index = self._reduced(expression, replaced, scope)
            if index is not None:
                return index
            mapped.append(self.scalar(expression, scope, replaced))
            columns.append(Col(None, name))
            return len(columns) - 1

        picked = [place(e, n) for e, n in zip(outputs, names)]
        by_name = {n: picked[i] for i, n in enumerate(names)}
        orders = []
        for o in ordered:
            target = o.this
            named = isinstance(target, exp.Column) and not target.table and target.name in by_name
            orders.append((by_name[target.name] if named else place(target, target.sql(dialect=Sluice)), o))
        distinct = select.args.get("distinct")
        on = distinct.args.get("on") if distinct is not None else None
        # qualify writes DISTINCT ON's keys as a tuple's fields (`f1 => name`).
        on_keys = [k.expression if isinstance(k, exp.PropertyEQ) else k for k in (on.expressions if on else [])]
        distinct_on = [place(k, k.sql(dialect=Sluice)) for k in on_keys]
        if mapped:
            relation = Relation(Node(f"Map ({', '.join(mapped)})", [relation.node]), columns)
        output = [Col(None, n) for n in names]
        if on is not None:
            # DISTINCT ON: the first row of each group in the query's order, as Materialize plans it.
            ordering = ", ".join(_order_text(self._column(i, columns), o) for i, o in orders)
            parts = [f"group_by=[{self._list(distinct_on, columns)}]"] + ([f"order_by=[{ordering}]"] if orders else [])
            relation = Relation(Node(f"TopK {' '.join(parts)} limit=1", [relation.node]), columns)
        elif distinct is not None:
            # Sorted by outputs only (PostgreSQL's rule for SELECT DISTINCT).
            orders = [(picked.index(i) if i in picked else i, o) for i, o in orders]
            relation = self._project(relation, picked, output)
            every = self._list(range(len(picked)), output)
            relation = Relation(Node(f"Distinct group_by=[{every}]", [relation.node]), output)
            picked = list(range(len(picked)))
        return self._finish(relation, orders, picked, select, top, output)

    def _finish(self, relation: Relation, orders, picked: list[int], query, top: bool, output) -> Relation:
        """ORDER BY / LIMIT / OFFSET: `Finish` on the query itself (done as the rows are
        returned), `TopK` inside one; then the outputs projected."""
        limit = _number(query.args.get("limit"))
        offset = _number(query.args.get("offset"))
        keys = ", ".join(_order_text(self._column(i, relation.columns), o) for i, o in orders)
        parts = ([f"order_by=[{keys}]"] if orders else []) + ([f"limit={limit}"] if limit is not None else [])
        parts += [f"offset={offset}"] if offset is not None else []
        if parts and top:
            shown = self._list(picked, relation.columns)
            return Relation(Node(f"Finish {' '.join(parts)} output=[{shown}]", [relation.node]), output)
        if parts and (limit is not None or offset is not None):
            relation = Relation(Node(f"TopK {' '.join(parts)}", [relation.node]), relation.columns)
        return self._project(relation, picked, output)

    def _project(self, relation: Relation, picked: list[int], output: list[Col]) -> Relation:
        if picked == list(range(len(relation.columns))):
            return Relation(relation.node, output)
        node = Node(f"Project ({self._list(picked, relation.columns)})", [relation.node])
        return Relation(node, output)

    def from_clause(self, select: exp.Select) -> Relation:
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            return Relation(Node("Constant", rows=["()"]), [])
        relation = self.from_item(from_.this)
        for join in select.args.get("joins") or []:
            right = self.from_item(join.this)
            columns = relation.columns + right.columns
            on = join.args.get("on")
            side = (join.side or "").upper()
            if join.args.get("using"):
                raise _unsupported(join)
            if side:
                name = {"LEFT": "LeftOuterJoin", "RIGHT": "RightOuterJoin", "FULL": "FullOuterJoin"}[side]
                condition = self.scalar(on, columns) if on is not None else "true"
                node = Node(f"{name} {_parenthesized(condition)}", [relation.node, right.node])
            elif on is None or (isinstance(on, exp.Boolean) and on.this):
                node = Node("CrossJoin", [relation.node, right.node])
            else:
                conjuncts = [_bare(self.scalar(c, columns)) for c in _conjuncts(on)]
                node = Node(f"Join on=({' AND '.join(conjuncts)})", [relation.node, right.node])
            relation = Relation(node, columns)
        return relation

    def from_item(self, item: exp.Expr) -> Relation:
        alias = item.alias_or_name
        if isinstance(item, exp.Table):
            cte = None if item.args.get("db") else self.named[-1].get(item.name)
            if cte is not None:
                return Relation(Node(f"Get {cte.label}"), [Col(alias, n) for n in cte.columns])
            errors = item.meta.get(READ_ERRORS)
            name = item.name[len("only errors(") : -1] if errors == "ONLY" else item.name
            catalog_item = self.catalog.get(name)
            if catalog_item is None:
                raise _unsupported(item)
            return self.get(catalog_item, errors, alias)
        if isinstance(item, exp.Subquery):
            inner = self.relation(item.this)
            alias_node = item.args.get("alias")
            names = [c.name for c in alias_node.columns] if alias_node is not None and alias_node.columns else [
                c.name for c in inner.columns
            ]
            return Relation(inner.node, [Col(alias, n) for n in names])
        if isinstance(item, exp.Values):
            return self.values(item)
        raise _unsupported(item)

    def get(self, item: Item, errors: str | None, alias: str) -> Relation:
        """`Get` of a catalog relation; a view is evaluated as a cte of its own query."""
        if item.kind in READ_TIME:
            cte = self.views.get(item.id)
            if cte is None:
                read = self._reads.get(item.id)
                if read is None or read.query is None:
                    raise InternalError.bug(f'view "{item.name}" explained without its query')
                # A view's query sees no column and no CTE of the query reading it.
                saved = self.scopes, self.named
                self.scopes, self.named = [], [{}]
                try:
                    inner = self.query(read.query)
                finally:
                    self.scopes, self.named = saved
                cte = self._cte(f"{SCHEMA}.{item.name}", inner.node, [c.name for c in item.columns])
                self.views[item.id] = cte
            return Relation(Node(f"Get {cte.label}"), [Col(alias, c.name) for c in item.columns])
        columns = [Col(alias, c.name) for c in item.columns]
        if errors == "ONLY":
            columns = [Col(alias, "message"), Col(alias, "code")]
        return Relation(Node(f"Get {SCHEMA}.{item.name}", note=self._errors_note(item, errors)), columns)

    def _errors_note(self, item: Item, errors: str | None) -> str | None:
        """What happens to the errors of what a `Get` reads."""
        if item.kind == kinds.DEAD_LETTER_TABLE:
            return f"dead-letter table of {SCHEMA}.{self.catalog.by_id(item.dead_letter_desc.source).name}"
        if item.kind != kinds.SOURCE:
            return None
        desc = item.source_desc
        dead_letters = None if desc.dead_letter_table is None else self.catalog.by_id(desc.dead_letter_table).name
        if errors == "ONLY":
            if dead_letters is not None:
                return f"reads: its errors (ONLY ERRORS): none, they go to dead-letter table {SCHEMA}.{dead_letters}"
            return "reads: its errors (ONLY ERRORS)"
        said = []
        if desc.inline_error_column is not None:
            also = " and propagated" if desc.propagate_value_errors else ""
            said.append(f"value errors: inline as {desc.inline_error_column}{also}")
        if dead_letters is not None:
            said.append(f"errors: dead-letter table {SCHEMA}.{dead_letters}")
        elif errors == "IGNORE":
            said.append("errors: ignored (IGNORE ERRORS)")
        else:
            said.append("errors: fail the query")
        if desc.error_tolerance is not None:
            said.append(f"tolerance: {desc.error_tolerance}")
        return ", ".join(said)

    def _cte(self, name: str, node: Node, columns: list[str]) -> Cte:
        label = f"l{len(self.ctes)}"
        cte = Cte(label, f"[{label} as {name}]", node, columns)
        self.ctes.append(cte)
        return cte

    # ------------------------------------------------------------ scalars

    def predicate(self, condition: exp.Expr, scope: list[Col], replaced=None) -> str:
        """A Filter's predicate: its conjuncts, each parenthesized, joined by AND."""
        return " AND ".join(_parenthesized(self.scalar(c, scope, replaced)) for c in _conjuncts(condition))

    def scalar(self, expression: exp.Expr, scope: list[Col], replaced=None) -> str:
        """`expression` as text, its columns as `#n` of `scope` (or of the queries around)."""
        copy = expression.copy()
        replaced = replaced or {}

        def rewrite(node: exp.Expr) -> exp.Expr:
            if replaced and not isinstance(node, exp.Literal):
                index = replaced.get(_key(node))
                if index is not None:
                    return exp.Var(this=self._column(index, scope))
            if isinstance(node, exp.Column):
                return exp.Var(this=self._reference(node, scope))
            if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.In) and node.args.get("query")):
                return exp.Var(this=self._subquery(node, scope))
            if isinstance(node, exp.Window):
                return exp.Var(this=self._window(node, scope, replaced))
            if isinstance(node, exp.Binary) and not isinstance(node.parent, exp.Paren):
                return exp.Paren(this=node)
            return node

        rewritten = _transform(copy, rewrite)
        return rewritten.sql(dialect=Sluice, normalize_functions="lower")

    def _window(self, window: exp.Window, scope: list[Col], replaced) -> str:
        """A window function as Materialize writes one: `f(…) over (partition by […] order by […])`."""
        call = self.scalar(window.this, scope, replaced)
        keys = ", ".join(self.scalar(p, scope, replaced) for p in window.args.get("partition_by") or [])
        order = window.args.get("order")
        orders = ", ".join(
            _order_text(self.scalar(o.this, scope, replaced), o) for o in (order.expressions if order else [])
        )
        spec = window.args.get("spec")
        frame = f" {spec.sql(dialect=Sluice).lower()}" if spec is not None else ""
        partition = f"partition by [{keys}] " if keys else ""
        return f"{call} over ({partition}order by [{orders}]{frame})"

    def _subquery(self, node: exp.Expr, scope: list[Col]) -> str:
        query = node.args.get("query") or node.this
        query = query.this if isinstance(query, exp.Subquery) else query
        self.scopes.append(scope)
        try:
            inner = self.relation(query)
        finally:
            self.scopes.pop()
        self.subqueries += 1
        cte = self._cte(f"subquery-{self.subqueries}", inner.node, [c.name for c in inner.columns])
        if isinstance(node, exp.Exists):
            return f"exists(Get {cte.label})"
        if isinstance(node, exp.In):
            return f"({self.scalar(node.this, scope)} = any(Get {cte.label}))"
        return f"select(Get {cte.label})"

    def _reference(self, column: exp.Column, scope: list[Col]) -> str:
        index = self._index(column, scope)
        if index is not None:
            return self._column(index, scope)
        for depth, outer in enumerate(reversed(self.scopes), start=1):
            index = self._index(column, outer)
            if index is not None:
                return "#" + "^" * depth + self._column(index, outer)[1:]
        raise FeatureNotSupported(f'EXPLAIN cannot place column "{column.sql(dialect=Sluice)}" in the plan')

    @staticmethod
    def _index(column: exp.Column, scope: list[Col]) -> int | None:
        for i, col in enumerate(scope):
            if col.name == column.name and (not column.table or col.qualifier == column.table):
                return i
        return None

    def _reduced(self, expression: exp.Expr, replaced: dict[str, int], scope: list[Col]) -> int | None:
        if replaced:
            return replaced.get(_key(expression))
        if isinstance(expression, exp.Column):
            return self._index(expression, scope)
        return None

    def _column(self, index: int, scope: list[Col]) -> str:
        if self.humanized and index < len(scope) and scope[index].name and not scope[index].name.startswith("_col_"):
            return f"#{index}{{{scope[index].name}}}"
        return f"#{index}"

    def _list(self, indexes, scope: list[Col]) -> str:
        return ", ".join(self._column(i, scope) for i in indexes)


def _transform(node: exp.Expr, rewrite) -> exp.Expr:
    """`node` with `rewrite` applied top-down: what it replaces is not descended into."""
    replaced = rewrite(node)
    if replaced is not node:
        if isinstance(replaced, exp.Paren) and replaced.this is node:
            for key, value in list(node.args.items()):
                node.set(key, _children(value, rewrite))
        return replaced
    for key, value in list(node.args.items()):
        node.set(key, _children(value, rewrite))
    return node


def _children(value, rewrite):
    if isinstance(value, exp.Expression):
        return _transform(value, rewrite)
    if isinstance(value, list):
        return [_transform(v, rewrite) if isinstance(v, exp.Expression) else v for v in value]
    return value


def _aggregates(expressions) -> list[exp.Expr]:
    """The aggregate calls of a SELECT (not a window's, not a subquery's), once each."""
    found: dict[str, exp.Expr] = {}
    for expression in expressions:
        for node in expression.find_all(exp.AggFunc):
            if isinstance(node.parent, exp.Window) or _in_subquery(node, expression):
                continue
            # count(x) FILTER (WHERE …) is one aggregate
            whole = node.parent if isinstance(node.parent, exp.Filter) else node
            found.setdefault(_key(whole), whole)
    return list(found.values())


def _in_subquery(node: exp.Expr, root: exp.Expr) -> bool:
    current: exp.Expr | None = node
    while current is not root and current is not None:
        current = current.parent
        if current is not root and isinstance(current, (exp.Subquery, exp.Select)):
            return True
    return False


def _key(node: exp.Expr) -> str:
    return node.sql(dialect=Sluice)


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def _parenthesized(text: str) -> str:
    """`text` in parentheses unless it is one term already (`(…)`, `f(…)`, `#0`)."""
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == " " and depth == 0:
            return f"({text})"
    return text


def _bare(text: str) -> str:
    return text[1:-1] if text.startswith("(") and _closes_at_end(text) else text


def _closes_at_end(text: str) -> bool:
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(text) - 1
    return False


def _order_text(column: str, ordered: exp.Ordered) -> str:
    desc = bool(ordered.args.get("desc"))
    nulls_first = ordered.args.get("nulls_first")
    if nulls_first is None:
        nulls_first = desc  # PostgreSQL's default: NULLs are larger than every value
    return f"{column} {'desc' if desc else 'asc'} {'nulls_first' if nulls_first else 'nulls_last'}"


def _output_index(key: exp.Expr, columns: list[Col]) -> int:
    """The output a set operation's ORDER BY names: by position or by name."""
    if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(columns):
        return int(key.this) - 1
    if isinstance(key, exp.Column) and not key.table:
        for i, column in enumerate(columns):
            if column.name == key.name:
                return i
    raise _unsupported(key)


def _number(clause) -> str | None:
    if clause is None:
        return None
    value = clause.args.get("expression") or clause.args.get("count") or clause.this  # LIMIT, FETCH
    return value.sql(dialect=Sluice)


def _all_reads(plan: QueryPlan):
    for read in plan.reads:
        yield read
        if read.query is not None:
            yield from _all_reads(read.query)


def _unsupported(node: exp.Expr) -> FeatureNotSupported:
    return FeatureNotSupported(f"EXPLAIN does not show a plan with {node.sql(dialect=Sluice)} yet")

