"""Query bodies against the catalog: names, output columns, reads, timeline.

Tables a query names are resolved to catalog relations (`IGNORE ERRORS` / `ONLY ERRORS`
only on sources); sqlglot's `qualify` and `annotate_types` then run against the catalog's
columns, and what they cannot resolve becomes an error with a caret in the query. A view
the query reads is planned here too, from its stored SQL, and travels with its read: the
plan is complete, and rendering it plans nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.catalog.types import TEXT, UNNAMED_COLUMN, Column, SqlType
from sluice.errors import (
    AmbiguousColumn,
    FeatureNotSupported,
    Span,
    UndefinedColumn,
    UndefinedObject,
    WrongObjectType,
)
from sluice.plan.names import SCHEMA_QUALIFIERS, did_you_mean, unknown_item
from sluice.plan.plans import QueryPlan, Read
from sluice.plan.records import build_records, resolve_pg_typeof, sql_type, sqlglot_type
from sluice.plan.timelines import single_timeline
from sluice.syntax.ast import QueryBody
from sluice.syntax.query import ERRORS_MODIFIER, Sluice, parse_query

READ_ERRORS = "sluice_read_errors"  # a table reference's meta: None, "IGNORE" or "ONLY"
ONLY_ERRORS_COLUMNS = (Column("message", TEXT, False), Column("code", TEXT, False))

@dataclass
class _Reference:
    """One table reference in the query and the relation it reads."""

    table: exp.Table
    item: Item
    errors: str | None

    @property
    def columns(self) -> tuple[Column, ...]:
        return ONLY_ERRORS_COLUMNS if self.errors == "ONLY" else self.item.columns

    @property
    def schema_name(self) -> str:
        # ONLY ERRORS reads another shape than the relation, so it gets its own name.
        return f"only errors({self.item.name})" if self.errors == "ONLY" else self.item.name


def plan_query(body: QueryBody, catalog: Catalog, status: str = "SELECT") -> QueryPlan:
    offset = body.span.start if body.span is not None else 0
    expression, names = _name_outputs(_as_select(body.expression.copy()))
    build_records(expression)
    _refuse_unsupported_functions(expression, offset)
    references = _references(expression, catalog, offset)
    for ref in references:
        # Each read says how it reads (`Read.errors`); the tree keeps the relation's name,
        # and the reference how it reads, for EXPLAIN (`READ_ERRORS` in its meta).
        ref.table.set(ERRORS_MODIFIER, None)
        ref.table.meta[READ_ERRORS] = ref.errors
        if ref.errors == "ONLY":
            if ref.table.alias == "":
                ref.table.set("alias", exp.TableAlias(this=exp.to_identifier(ref.item.name)))
            ref.table.set("this", exp.to_identifier(ref.schema_name, quoted=True))
            ref.table.set("db", None)
            ref.table.set("catalog", None)
    schema: dict[str, object] = {
        ref.schema_name: {c.name: sqlglot_type(c.type) for c in ref.columns}
        for ref in references
    }
    try:
        qualified = qualify(expression, schema=schema, dialect=Sluice, quote_identifiers=False)
        resolve_pg_typeof(annotate_types(qualified, schema=schema, dialect=Sluice))
    except OptimizeError as e:
        raise _column_error(str(e), body.expression, references, offset) from None
    except Exception as e:  # noqa: BLE001 - sqlglot's optimizer asserts on shapes it lacks
        raise FeatureNotSupported(
            "sluice cannot plan this query yet", span=body.span, detail=f"sqlglot: {e}"
        ) from None
    if not isinstance(qualified, exp.Query):
        raise FeatureNotSupported("only queries can be planned here", span=body.span)
    columns = _output_columns(qualified, references, names)
    read_as = {(r.item.id, r.errors): r.item for r in references}
    reads = tuple(relation_read(item, errors, catalog) for (_, errors), item in read_as.items())
    timeline = single_timeline(catalog, [r.item_id for r in reads], body.span)
    return QueryPlan(body.sql, qualified, columns, reads, timeline, status)


# PostgreSQL functions sqlglot reads that Spark would run with other results: Spark's
# `sequence` counts down where `generate_series(3, 1)` is empty.
UNSUPPORTED_FUNCTIONS = {exp.ExplodingGenerateSeries: "generate_series", exp.GenerateSeries: "generate_series"}


def _refuse_unsupported_functions(expression: exp.Expr, offset: int) -> None:
    for node in expression.find_all(*UNSUPPORTED_FUNCTIONS):
        name = UNSUPPORTED_FUNCTIONS[type(node)]
        raise FeatureNotSupported(f"function {name} is not supported", span=_span(node, offset))


def relation_read(item: Item, errors: str | None, catalog: Catalog) -> Read:
    """How a query reads `item`: a view with its own query (`view_query`)."""
    if item.kind not in (kinds.VIEW, kinds.MATERIALIZED_VIEW):
        return Read(item.id, errors)
    return Read(item.id, errors, view_query(item, catalog))


def view_query(view: Item, catalog: Catalog) -> QueryPlan:
    """A view's query (materialized or not), planned from its stored SQL."""
    for dependency in view.depends_on:
        # What the stored SQL reads must be there: a missing one is a damaged catalog
        # (XX001 naming it), not an unknown name in a statement that never wrote it.
        catalog.by_id(dependency)
    return plan_query(parse_query(view.view_desc.query, 0, "query"), catalog)


def _as_select(expression: exp.Expr) -> exp.Expr:
    """A bare `VALUES …` as `SELECT * FROM (VALUES …) AS values(column1, …)`, PostgreSQL's
    names for its columns."""
    if not isinstance(expression, exp.Values) or expression.alias:
        return expression
    width = len(expression.expressions[0].expressions) if expression.expressions else 0
    columns = [exp.to_identifier(f"column{i}") for i in range(1, width + 1)]
    expression.set("alias", exp.TableAlias(this=exp.to_identifier("values"), columns=columns))
    return exp.select("*").from_(expression)


def _name_outputs(expression: exp.Expr) -> tuple[exp.Expr, dict[str, str]]:
    """Alias every unnamed computed output up front, as `qualify` would later (its ORDER BY
    position expansion assumes they already are), with a name unique in the query, and
    the name PostgreSQL gives each: an outer query selecting it by that alias is named
    the same."""
    names: dict[str, str] = {}
    for select in expression.find_all(exp.Select):
        for output in select.expressions:
            if not isinstance(output, (exp.Alias, exp.Column, exp.Star)):
                alias = f"_col_{len(names)}"
                names[alias] = _postgres_name(output)
                # exp.Alias itself: `alias_` would put a subquery's alias inside it.
                output.replace(exp.Alias(this=output.copy(), alias=exp.to_identifier(alias)))
    return expression, names


def _references(expression: exp.Expr, catalog: Catalog, offset: int) -> list[_Reference]:
    ctes = {cte.alias_or_name for cte in expression.find_all(exp.CTE)}
    references = []
    for table in expression.find_all(exp.Table):
        if not table.name:
            continue
        span = _span(table.this, offset)
        if table.name in ctes and not table.args.get("db"):
            errors = table.args.get(ERRORS_MODIFIER)
            if errors is not None:
                raise WrongObjectType(
                    f'{errors} ERRORS is allowed on sources only, and "{table.name}" is a CTE',
                    span=span,
                )
            continue
        item = table_item(table, catalog, span)
        if item.kind not in kinds.RELATIONS:
            raise WrongObjectType(f'"{item.name}" is {kinds.a_kind(item.kind)}, not a relation', span=span)
        errors = table.args.get(ERRORS_MODIFIER)
        if errors is not None and item.kind != kinds.SOURCE:
            raise WrongObjectType(
                f'{errors} ERRORS is allowed on sources only, and "{item.name}" is {kinds.a_kind(item.kind)}',
                span=span,
            )
        references.append(_Reference(table, item, errors))
    return references


def table_item(table: exp.Table, catalog: Catalog, span: Span | None) -> Item:
    """The catalog item a table reference names (`x`, `public.x`, `materialize.public.x`)."""
    qualifiers = tuple(p.name for p in (table.args.get("catalog"), table.args.get("db")) if p)
    if qualifiers and qualifiers not in SCHEMA_QUALIFIERS:
        raise UndefinedObject(f"unknown schema '{'.'.join(qualifiers)}'", span=span)
    item = catalog.get(table.name)
    if item is None:
        raise unknown_item(table.name, span, (i.name for i in catalog if i.kind in kinds.RELATIONS))
    return item


def span_of(node: exp.Expr, body: QueryBody) -> Span | None:
    """Where `node`, a part of `body`'s tree, is in the script: where its first token is
    (sqlglot places tokens, not the nodes built of them)."""
    placed = next((n for n in node.walk() if "start" in n.meta), node)
    return _span(placed, body.span.start if body.span is not None else 0)


def _span(node: exp.Expr, offset: int) -> Span | None:
    start = node.meta.get("start")
    if start is None:
        return None
    return Span(offset + start, offset + node.meta.get("end", start) + 1)


def _column_error(message: str, original, references, offset: int):
    """Turn sqlglot's unresolved/unknown column complaint into PostgreSQL's error."""
    name = message.split("'")[1] if "'" in message else message.rsplit(" ", 1)[-1]
    name = name.split(".")[-1].strip('"')
    column = next(
        (c for c in original.find_all(exp.Column) if c.name == name),
        None,
    )
    span = None if column is None else _span(column.this, offset)
    table = "" if column is None else column.table
    qualifier = f"{table}." if table else ""
    if not qualifier:
        owners = [r for r in references if any(c.name == name for c in r.columns)]
        if len(owners) > 1:
            return AmbiguousColumn(f'column reference "{name}" is ambiguous', span=span)
    in_scope = (
        c.name for r in references if not qualifier or r.table.alias_or_name == table for c in r.columns
    )
    return UndefinedColumn(
        f'column "{qualifier}{name}" does not exist', span=span, hint=did_you_mean(name, in_scope)
    )


def _output_columns(qualified: exp.Query, references, names: dict[str, str]) -> tuple[Column, ...]:
    by_alias = {r.table.alias_or_name: r for r in references}
    nullable_sides = _outer_joined(qualified)
    columns = []
    for select in qualified.selects:
        inner = select.this if isinstance(select, exp.Alias) else select
        name = select.alias_or_name
        columns.append(Column(names.get(name, name), *_type_of(inner, by_alias, nullable_sides)))
    return tuple(columns)


def _type_of(node: exp.Expr, by_alias, nullable_sides) -> tuple[SqlType, bool]:
    if isinstance(node, exp.Column) and node.table in by_alias:
        source = next((c for c in by_alias[node.table].columns if c.name == node.name), None)
        if source is not None:
            return source.type, source.nullable or node.table in nullable_sides
    if isinstance(node, (exp.JSONExtractScalar, exp.JSONBExtractScalar, exp.Null)):
        return TEXT, True
    if isinstance(node, exp.Anonymous) and node.name.lower() == "jsonb_typeof":
        return TEXT, True
    if isinstance(node, (exp.JSONExtract, exp.JSONBExtract)):
        return SqlType("jsonb"), True
    nullable = not isinstance(node, (exp.Literal, exp.Boolean, exp.Count))
    return sql_type(node.type), nullable


def _outer_joined(query: exp.Expr) -> set[str]:
    """Aliases of relations on the nullable side of an outer join."""
    nullable: set[str] = set()
    for select in query.find_all(exp.Select):
        from_ = select.args.get("from_") or select.args.get("from")
        left = [from_.this.alias_or_name] if from_ is not None else []
        for join in select.args.get("joins") or []:
            side = join.side.upper() if join.side else ""
            if side in ("LEFT", "FULL"):
                nullable.add(join.this.alias_or_name)
            if side in ("RIGHT", "FULL"):
                nullable.update(left)
            left.append(join.this.alias_or_name)
    return nullable


# PostgreSQL names a cast of an unnamed value by its target type's internal name.
_CAST_NAMES = {
    exp.DataType.Type.INT: "int4",
    exp.DataType.Type.BIGINT: "int8",
    exp.DataType.Type.SMALLINT: "int2",
    exp.DataType.Type.FLOAT: "float4",
    exp.DataType.Type.DOUBLE: "float8",
    exp.DataType.Type.BOOLEAN: "bool",
    exp.DataType.Type.DECIMAL: "numeric",
    exp.DataType.Type.VARCHAR: "varchar",
    exp.DataType.Type.TIMESTAMPTZ: "timestamptz",
}


def _postgres_name(node: exp.Expr) -> str:
    """The column name PostgreSQL gives an unaliased select expression."""
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Cast):
        # A cast is named by what it casts, or else by the type it casts to.
        inner = _postgres_name(node.this)
        return inner if inner != UNNAMED_COLUMN else _CAST_NAMES.get(node.to.this, node.to.this.name.lower())
    if isinstance(node, exp.Tuple):
        return "row"
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Connector, exp.Binary, exp.Unary)):
        return node.sql_name().lower()
    if isinstance(node, exp.Boolean):
        return "bool"
    return UNNAMED_COLUMN
