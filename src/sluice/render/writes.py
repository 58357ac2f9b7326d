"""INSERT, UPDATE and DELETE on tables: computed on Spark, stored by `TableStore`.

Each statement is turned into a query over the catalog — the rows to add, or the table's
rows after the change — planned like any SELECT, run, and written back in one atomic
replacement of the table's file. `VALUES` of plain literals that need no cast are stored
as they are, without a Spark job.
"""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from sqlglot import exp

from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.errors import NotNullViolation, ParseError, UndefinedColumn
from sluice.plan.plans import WritePlan
from sluice.plan.queries import plan_query
from sluice.render.query import QueryRenderer
from sluice.render.types import spark_type
from sluice.syntax.ast import QueryBody
from sluice.syntax.query import Sluice
from sluice.tables import TableStore


def execute_write(plan: WritePlan, catalog: Catalog, store: TableStore, renderer: QueryRenderer) -> str:
    """Carry out the write; the command tag (`INSERT 0 n`, `UPDATE n`, `DELETE n`)."""
    item = catalog.by_id(plan.table_id)
    expression = plan.expression
    if isinstance(expression, exp.Insert):
        added = _insert(expression, item, catalog, renderer)
        store.write(item, store.read(item) + added)
        return f"INSERT 0 {len(added)}"
    condition = expression.args.get("where")
    condition = exp.true() if condition is None else condition.this
    matched = _count(item, condition, catalog, renderer)
    if isinstance(expression, exp.Delete):
        kept = _select(item, [exp.column(c.name) for c in item.columns], exp.not_(_is_true(condition)))
        store.write(item, _run(kept, item, catalog, renderer))
        return f"DELETE {matched}"
    assigned = {eq.this.name: eq.expression for eq in expression.expressions}
    for name in assigned:
        if item.column(name) is None:
            raise UndefinedColumn(f'column "{name}" of relation "{item.name}" does not exist')
    columns = [
        exp.Case(ifs=[exp.If(this=_is_true(condition), true=assigned[c.name])], default=exp.column(c.name))
        if c.name in assigned
        else exp.column(c.name)
        for c in item.columns
    ]
    rows = _run(_select(item, columns, None), item, catalog, renderer)
    _check_not_null(item, rows)
    store.write(item, rows)
    return f"UPDATE {matched}"


def _insert(expression: exp.Insert, item: Item, catalog: Catalog, renderer: QueryRenderer) -> list[tuple]:
    target = expression.this
    names = (
        [c.name for c in target.expressions] if isinstance(target, exp.Schema) else [c.name for c in item.columns]
    )
    for name in names:
        if item.column(name) is None:
            raise UndefinedColumn(f'column "{name}" of relation "{item.name}" does not exist')
    source = expression.args["expression"]
    query = plan_query(QueryBody(source.sql(dialect=Sluice), source), catalog, "INSERT")
    if len(query.columns) > len(names):
        raise ParseError("INSERT has more expressions than target columns")
    rows = _literal_rows(source, names, item)
    if rows is not None:
        _check_not_null(item, rows)
        return rows
    defaults = dict(item.details.defaults)

    def stored(frame: DataFrame) -> list[SparkColumn]:
        produced = dict(zip(names, frame.columns))
        columns = []
        for column in item.columns:
            if column.name in produced:
                value = _stored(frame, produced[column.name], column)
            elif column.name in defaults:
                value = F.expr(exp.maybe_parse(defaults[column.name], dialect=Sluice).sql(dialect="spark"))
                value = value.cast(spark_type(column.type))
            else:
                value = F.lit(None).cast(spark_type(column.type))
            columns.append(value.alias(column.name))
        return columns

    rows = renderer.collect(query, stored)
    _check_not_null(item, rows)
    return rows


_INTEGER_RANGES = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
_NOT_STORED = object()


def _literal_rows(source: exp.Expression, names: list[str], item: Item) -> list[tuple] | None:
    """`VALUES` of plain literals (what SQL scripts insert most), as stored, without a
    Spark job; None when any value needs Spark's casts or a column's default."""
    if not isinstance(source, exp.Values):
        return None
    positions = {name: i for i, name in enumerate(names)}
    if any(c.name not in positions and c.name in dict(item.details.defaults) for c in item.columns):
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


def _stored_literal(value: exp.Expression, type_name: str) -> object:
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


def _is_true(condition: exp.Expression) -> exp.Expression:
    """`COALESCE(condition, FALSE)`: rows where the condition is NULL are not touched."""
    return exp.func("COALESCE", exp.paren(condition.copy()), exp.false())


def _select(item: Item, columns: list[exp.Expression], where) -> exp.Select:
    """`SELECT <columns, named as the table's> FROM <table> [WHERE …]`."""
    named = [exp.alias_(c, col.name) for c, col in zip(columns, item.columns, strict=True)]
    query = exp.select(*named).from_(exp.to_table(item.name))
    return query if where is None else query.where(where)


def _run(query: exp.Select, item: Item, catalog: Catalog, renderer: QueryRenderer) -> list[tuple]:
    planned = plan_query(QueryBody(query.sql(dialect=Sluice), query), catalog)
    return renderer.collect(
        planned, lambda frame: [_stored(frame, name, c) for name, c in zip(frame.columns, item.columns)]
    )


def _stored(frame: DataFrame, name: str, column: Column) -> SparkColumn:
    """A result column as the table stores it (a jsonb VARIANT as its JSON text)."""
    value = F.col(f"`{name}`")
    if isinstance(frame.schema[name].dataType, T.VariantType):
        return F.to_json(value)
    return value.cast(spark_type(column.type))


def _count(item: Item, condition: exp.Expression, catalog: Catalog, renderer: QueryRenderer) -> int:
    query = exp.select(exp.func("COUNT", exp.Star()).as_("n")).from_(exp.to_table(item.name))
    query = query.where(_is_true(condition))
    planned = plan_query(QueryBody(query.sql(dialect=Sluice), query), catalog)
    return renderer.collect(planned)[0][0]


def _check_not_null(item: Item, rows: list[tuple]) -> None:
    for index, column in enumerate(item.columns):
        if not column.nullable and any(row[index] is None for row in rows):
            raise NotNullViolation(
                f'null value in column "{column.name}" of relation "{item.name}" violates '
                "not-null constraint"
            )
