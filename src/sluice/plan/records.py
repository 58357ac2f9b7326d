"""Records in queries and the type names of PostgreSQL and Materialize.

`ROW(a, b)` and `(a, b)` are records with PostgreSQL's field names `f1`, `f2`, … (Spark
structs); a catalog record column is a struct to sqlglot, so its type flows through
`annotate_types`. `sqlglot_type` and `sql_type` translate between catalog types and
sqlglot's, and `resolve_pg_typeof` replaces each `pg_typeof(x)` by the name of `x`'s type
as Materialize prints it, once types are known.
"""

from __future__ import annotations

from sqlglot import exp

from sluice.catalog.types import Column, SqlType, record

_TO_SQLGLOT = {
    "text": "TEXT",
    "bytea": "BYTEA",
    "jsonb": "JSONB",
    "integer": "INT",
    "smallint": "SMALLINT",
    "bigint": "BIGINT",
    "real": "REAL",
    "double precision": "DOUBLE PRECISION",
    "boolean": "BOOLEAN",
    "numeric": "NUMERIC",
    "date": "DATE",
    "time": "TIME",
    "timestamp": "TIMESTAMP",
    "timestamp with time zone": "TIMESTAMPTZ",
    "interval": "INTERVAL",
    "uuid": "UUID",
    "mz_timestamp": "NUMERIC",
}
_FROM_SQLGLOT = {
    "TEXT": "text",
    "VARCHAR": "text",
    "CHAR": "text",
    "NCHAR": "text",
    "NVARCHAR": "text",
    "VARBINARY": "bytea",
    "BINARY": "bytea",
    "JSONB": "jsonb",
    "JSON": "jsonb",
    "INT": "integer",
    "SMALLINT": "smallint",
    "TINYINT": "smallint",
    "BIGINT": "bigint",
    "FLOAT": "real",
    "DOUBLE": "double precision",
    "BOOLEAN": "boolean",
    "DECIMAL": "numeric",
    "DATE": "date",
    "TIME": "time",
    "TIMESTAMP": "timestamp",
    "TIMESTAMPTZ": "timestamp with time zone",
    "INTERVAL": "interval",
    "UUID": "uuid",
}
# pg_typeof prints PostgreSQL's full names where Materialize's catalog uses short ones.
_PG_TYPEOF_NAMES = {
    "timestamp": "timestamp without time zone",
    "time": "time without time zone",
}


def sqlglot_type(sql_type: SqlType) -> str:
    """A catalog type as sqlglot's type text (a record as a STRUCT of its fields)."""
    if sql_type.name == "record" and sql_type.fields:
        fields = ", ".join(f'"{f.name}" {sqlglot_type(f.type)}' for f in sql_type.fields)
        return f"STRUCT<{fields}>"
    return _TO_SQLGLOT.get(sql_type.name, "UNKNOWN")


def sql_type(data_type: exp.DataType | None) -> SqlType:
    """sqlglot's type of an expression as a catalog type (a STRUCT as a record)."""
    if data_type is None:
        return SqlType("unknown")
    if data_type.this == exp.DataType.Type.STRUCT:
        return record(*(Column(f.name, sql_type(f.args.get("kind")), True) for f in data_type.expressions))
    name = data_type.this.name
    return SqlType(_FROM_SQLGLOT.get(name, name.lower()))


def build_records(expression: exp.Expr) -> exp.Expr:
    """Every `ROW(…)`, and every `(…)` of two or more values that is a value (not a side
    of a row comparison, IN's left side or a GROUP BY list), as a struct with fields `f1`,
    `f2`, …, in place."""
    records = [
        n
        for n in expression.find_all(exp.Anonymous, exp.Tuple)
        if (n.name.lower() == "row" if isinstance(n, exp.Anonymous) else _is_value(n))
    ]
    for node in reversed(records):  # innermost first: an outer record takes its fields built
        fields = [
            exp.PropertyEQ(this=exp.to_identifier(f"f{i}"), expression=value.copy())
            for i, value in enumerate(node.expressions, 1)
        ]
        node.replace(exp.Struct(expressions=fields))
    return expression


def _is_value(node: exp.Expr) -> bool:
    compared = isinstance(node.parent, (exp.In, exp.Binary)) and not isinstance(node.parent, exp.Is)
    return not compared and not isinstance(node.parent, (exp.Values, exp.Group))


def resolve_pg_typeof(expression: exp.Expr) -> exp.Expr:
    """Every `pg_typeof(x)` of the type-annotated `expression` as the literal name of
    `x`'s type, in place."""
    for node in list(expression.find_all(exp.Anonymous)):
        if node.name.lower() == "pg_typeof" and len(node.expressions) == 1:
            value = node.expressions[0]
            # A literal with a point or an exponent is numeric (sqlglot calls it double).
            decimal = isinstance(value, exp.Literal) and value.is_number and not value.is_int
            name = "numeric" if decimal else sql_type(value.type).display()
            literal = exp.Literal.string(_PG_TYPEOF_NAMES.get(name, name))
            literal.type = exp.DataType.build("TEXT")
            node.replace(literal)
    return expression
