"""INSERT, UPDATE and DELETE planned: the statement checked (its clauses, its target, the
columns it names) and turned into the queries whose rows the table stores.

An INSERT's rows are its query's, widened to the table's columns (a column it does not
fill takes its default, or NULL); UPDATE and DELETE become the table's rows after the
change, and a count of the rows their WHERE matches. `VALUES` of plain literals that need
no cast are planned as the rows they store, so that carrying them out runs no query.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.errors import (
    DatatypeMismatch,
    FeatureNotSupported,
    InternalError,
    ParseError,
    TooManyExpressions,
    UndefinedColumn,
    WrongObjectType,
)
from sluice.plan.plans import QueryPlan, WritePlan
from sluice.plan.queries import plan_query, span_of, table_item
from sluice.syntax import ast
from sluice.syntax.query import Sluice, assignment_targets

# What a write may hold besides its target: INSERT's rows, UPDATE's assignments, WHERE.
# Any other clause sqlglot reads (RETURNING, USING, ON CONFLICT, …) is refused, never
# silently dropped; so is anything on the target but its name.
_WRITE_PARTS = {"this", "expression", "expressions", "where"}
_TARGET_PARTS = {"this", "db", "catalog"}
_CLAUSE_NAMES = {
    "alias": "an alias of the target table",
    "conflict": "ON CONFLICT",
    "default": "DEFAULT VALUES",
    "from_": "FROM",
    "joins": "more than one target table",
    "order": "ORDER BY",
}
# The name an INSERT's own query goes by in the query that widens it to the table.
_INSERTED = "__inserted"


def plan_write(statement: ast.BodyStatement, catalog: Catalog) -> WritePlan:
    expression = statement.body.expression
    table = expression.this
    if isinstance(table, exp.Schema):
        table = table.this
    span = span_of(table.this, statement.body) or statement.span
    verb = type(statement).__name__.upper()
    alternative = expression.args.get("alternative")
    if alternative:
        raise FeatureNotSupported(f"INSERT OR {alternative.upper()} is not supported", span=span)
    for parts, allowed in ((expression.args, _WRITE_PARTS), (table.args, _TARGET_PARTS)):
        clause = next((k for k, v in parts.items() if v and k not in allowed), None)
        if clause is not None:
            words = _CLAUSE_NAMES.get(clause, clause.upper().replace("_", " "))
            raise FeatureNotSupported(f"{verb} with {words} is not supported", span=span)
    item = table_item(table, catalog, span)
    if item.kind == kinds.DEAD_LETTER_TABLE:
        raise WrongObjectType(f'cannot modify dead-letter table "{item.name}"', span=span)
    if item.kind != kinds.TABLE:
        raise WrongObjectType(f'cannot {verb} {item.kind} "{item.name}"', span=span)
    if isinstance(expression, exp.Insert):
        return _insert(statement, item, catalog)
    return _change(statement, verb, item, catalog)


def _insert(statement: ast.BodyStatement, item: Item, catalog: Catalog) -> WritePlan:
    expression = statement.body.expression
    target = expression.this
    named = target.expressions if isinstance(target, exp.Schema) else []
    for ident in named:
        if item.column(ident.name) is None:
            raise UndefinedColumn(
                f'column "{ident.name}" of relation "{item.name}" does not exist',
                span=span_of(ident, statement.body),
            )
    names = [i.name for i in named] or [c.name for c in item.columns]
    source = expression.args["expression"]
    query = _planned(source, statement, catalog, "INSERT")
    if len(query.columns) > len(names):
        raise TooManyExpressions(
            "INSERT has more expressions than target columns",
            span=span_of(_first_extra(source, len(names)), statement.body) or statement.span,
        )
    rows = _literal_rows(source, names, item)
    if rows is not None:
        return WritePlan(item.id, statement.body.sql, "INSERT", literal_rows=tuple(rows))
    produced = [exp.to_identifier(f"column{i}") for i in range(1, len(query.columns) + 1)]
    inserted = source.copy()
    alias = exp.TableAlias(this=exp.to_identifier(_INSERTED), columns=produced)
    if isinstance(inserted, exp.Values):
        inserted.set("alias", alias)
    else:
        inserted = exp.Subquery(this=inserted, alias=alias)
    by_name = dict(zip(names, produced))
    defaults = dict(item.table_desc.defaults)
    columns = [
        exp.column(by_name[c.name].copy(), _INSERTED)
        if c.name in by_name
        else _default(defaults[c.name]) if c.name in defaults else exp.null()
        for c in item.columns
    ]
    widened = _planned(_select(item, columns).from_(inserted), statement, catalog, "INSERT")
    return WritePlan(item.id, statement.body.sql, "INSERT", rows=widened)


def _first_extra(source: exp.Expr, width: int) -> exp.Expr:
    """The first of the source's expressions beyond `width` (the source itself for `*`)."""
    if isinstance(source, exp.Values):
        outputs = source.expressions[0].expressions
    elif isinstance(source, exp.Query):
        outputs = source.selects
    else:
        return source
    return outputs[width] if len(outputs) > width else source


def _default(text: str) -> exp.Expr:
    """A column's default, parsed from its stored SQL, with no position: it is not where
    the statement's text is."""
    default: exp.Expr = exp.maybe_parse(text, dialect=Sluice)
    for node in default.walk():
        node.meta.pop("start", None)
    return default


def _change(statement: ast.BodyStatement, verb: str, item: Item, catalog: Catalog) -> WritePlan:
    expression = statement.body.expression
    where = expression.args.get("where")
    matches = _is_true(exp.true() if where is None else where.this)
    count = exp.select(exp.func("COUNT", exp.Star()).as_("n")).from_(exp.to_table(item.name)).where(matches)
    matched = _planned(count, statement, catalog)
    if verb == "DELETE":
        kept = _select(item, [exp.column(c.name) for c in item.columns]).from_(exp.to_table(item.name))
        rows = kept.where(exp.not_(matches.copy()))
    else:
        assigned = _assignments(statement, item)
        columns = [
            exp.Case(
                ifs=[exp.If(this=matches.copy(), true=assigned[c.name].copy())], default=exp.column(c.name)
            )
            if c.name in assigned
            else exp.column(c.name)
            for c in item.columns
        ]
        rows = _select(item, columns).from_(exp.to_table(item.name))
    return WritePlan(
        item.id, statement.body.sql, verb, rows=_planned(rows, statement, catalog), matched=matched
    )


def _assignments(statement: ast.BodyStatement, item: Item) -> dict[str, exp.Expr]:
    """UPDATE's SET list as the value each column it names takes, in PostgreSQL's terms:
    a target is a column of the table (`x.b` a field of column `x`, `x[1]` an element of
    it), `(a, b) = (1, 2)` assigns a row, DEFAULT is the column's default."""
    assigned: dict[str, exp.Expr] = {}
    defaults = dict(item.table_desc.defaults)
    for assignment in statement.body.expression.expressions:
        targets = assignment_targets(assignment.this)
        several = isinstance(assignment.this, (exp.Tuple, exp.Paren))
        values = _row_values(assignment, targets, statement) if several else [assignment.expression]
        for target, value in zip(targets, values, strict=True):
            name = _assigned_column(target, item, statement)
            if name in assigned:
                raise ParseError(
                    f'multiple assignments to same column "{name}"', span=span_of(target, statement.body)
                )
            is_default = isinstance(value, exp.Column) and value.name.upper() == "DEFAULT" and not value.this.quoted
            assigned[name] = (_default(defaults[name]) if name in defaults else exp.null()) if is_default else value
    return assigned


def _row_values(assignment: exp.Expr, targets: list, statement: ast.BodyStatement) -> list[exp.Expr]:
    """The values a multiple-column assignment gives its targets, one each."""
    source = assignment.expression
    span = span_of(source, statement.body)
    is_row = isinstance(source, exp.Tuple) or (isinstance(source, exp.Anonymous) and source.name.upper() == "ROW")
    if is_row:
        if len(source.expressions) != len(targets):
            raise ParseError("number of columns does not match number of values", span=span)
        return source.expressions
    if isinstance(source.unnest(), exp.Query):
        raise FeatureNotSupported("UPDATE of several columns from a subquery is not supported", span=span)
    raise FeatureNotSupported(
        "source for a multiple-column UPDATE item must be a sub-SELECT or ROW() expression", span=span
    )


def _assigned_column(target: exp.Expr, item: Item, statement: ast.BodyStatement) -> str:
    """The column an UPDATE target names; a field or an element of it is refused as
    PostgreSQL refuses it, or as not supported."""
    subscripted = isinstance(target, exp.Bracket)
    while isinstance(target, exp.Bracket):
        target = target.this
    if not isinstance(target, exp.Column):  # the parser lets only (subscripted) columns through
        raise InternalError.bug(f"an UPDATE target that is a {type(target).__name__}")
    name, *fields = [part.name for part in target.parts]
    span = span_of(target, statement.body)
    column = item.column(name)
    if column is None:
        raise UndefinedColumn(f'column "{name}" of relation "{item.name}" does not exist', span=span)
    type_name = column.type.display()
    if fields and not column.type.fields:
        raise DatatypeMismatch(
            f'cannot assign to field "{fields[0]}" of column "{name}" because its type {type_name} '
            "is not a composite type",
            span=span,
        )
    if subscripted and column.type.element is None and not type_name.endswith("[]"):
        raise DatatypeMismatch(f"cannot subscript type {type_name} because it does not support subscripting", span=span)
    if fields or subscripted:
        part = "a field" if fields else "an element"
        raise FeatureNotSupported(f"UPDATE of {part} of a column is not supported", span=span)
    return name


def _planned(
    query: exp.Expr, statement: ast.BodyStatement, catalog: Catalog, status: str = "SELECT"
) -> QueryPlan:
    """`query`, built from parts of the statement's tree, planned: errors point into the
    statement's text."""
    return plan_query(ast.QueryBody(statement.body.sql, query, span=statement.body.span), catalog, status)


def _is_true(condition: exp.Expr) -> exp.Expr:
    """`COALESCE(condition, FALSE)`: rows where the condition is NULL are not touched."""
    return exp.func("COALESCE", exp.paren(condition.copy()), exp.false())


def _select(item: Item, columns: Sequence[exp.Expr]) -> exp.Select:
    """`SELECT <columns, named as the table's>`."""
    return exp.select(*(exp.alias_(c, col.name) for c, col in zip(columns, item.columns, strict=True)))


_INTEGER_RANGES = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
_NOT_STORED = object()


def _literal_rows(source: exp.Expr, names: list[str], item: Item) -> list[tuple] | None:
    """`VALUES` of plain literals (what SQL scripts insert most), as stored; None when any
    value needs Spark's casts or a column's default."""
    if not isinstance(source, exp.Values):
        return None
    positions = {name: i for i, name in enumerate(names)}
    if any(c.name not in positions and c.name in dict(item.table_desc.defaults) for c in item.columns):
        return None
    rows = []
    for row in source.expressions:
        values = row.expressions
        if len(values) != len(names):
            return None
        stored = tuple(
            _stored_literal(values[positions[c.name]], c.type.name) if c.name in positions else None
            for c in item.columns
        )
        if _NOT_STORED in stored:
            return None
        rows.append(stored)
    return rows


def _stored_literal(value: exp.Expr, type_name: str) -> object:
    """A literal as a column of `type_name` stores it, or `_NOT_STORED` when only a cast
    on Spark can say (or refuse)."""
    if isinstance(value, exp.Null):
        return None
    if isinstance(value, exp.Boolean):
        return value.this if type_name == "boolean" else _NOT_STORED
    negative = isinstance(value, exp.Neg)
    literal = value.this if negative else value
    if not isinstance(literal, exp.Literal):
        return _NOT_STORED
    if literal.is_string:
        return literal.this if type_name in ("text", "character varying") and not negative else _NOT_STORED
    text = ("-" if negative else "") + literal.this
    if type_name in _INTEGER_RANGES and literal.is_int:
        number, limit = int(text), _INTEGER_RANGES[type_name]
        return number if -limit <= number < limit else _NOT_STORED
    if type_name in ("double precision", "real"):
        return float(text)
    return _NOT_STORED
