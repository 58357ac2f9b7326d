"""Rule: a record cast to text is PostgreSQL's record text (record_out), where Spark's
struct text is `{1, a}`: `(1,a)`, a NULL field empty, a field quoted when it is empty or
holds a space, comma, quote, parenthesis or backslash, with `"` and `\\` doubled inside,
a boolean `t`/`f`, a bytea `\\x…` and a nested record its own text (quoted)."""

from __future__ import annotations

from sqlglot import exp

from sluice.errors import InternalError

_TEXT = exp.DataType.Type.TEXT
# The quoting lambda's parameter: a field's text.
_FIELD = "field_text"
# What makes record_out quote a field: these, or the field being empty.
_SPECIAL = r'[ \t\n\r\x0b\f",()\\]'


def record_text(expression: exp.Expr) -> exp.Expr:
    """Every cast of a record to text in the type-annotated `expression` as an expression
    yielding PostgreSQL's text of the record, in place, innermost first."""
    for cast in reversed(list(expression.find_all(exp.Cast))):
        if cast.to.is_type(*exp.DataType.TEXT_TYPES) and cast.this.is_type(exp.DataType.Type.STRUCT):
            cast.replace(_record(cast.this))
    return expression


def _record(value: exp.Expr) -> exp.Expr:
    """`(f1,f2,…)` of the struct `value`, NULL when `value` is. Each field's text appears
    once (quoted by a lambda), so a nested record's expression grows linearly."""
    if value.type is None:
        raise InternalError.bug("a record cast to text before its type was annotated")
    texts = exp.Array(expressions=[_field_text(_field(value, f)) for f in value.type.expressions])
    quoted = exp.Anonymous(this="transform", expressions=[texts, _quoting()])
    inner = exp.Anonymous(this="array_join", expressions=[quoted, exp.Literal.string(",")])
    text = exp.Anonymous(this="concat", expressions=[exp.Literal.string("("), inner, exp.Literal.string(")")])
    return exp.If(this=exp.Anonymous(this="isnull", expressions=[value.copy()]), true=exp.Null(), false=text)


def _field(value: exp.Expr, field: exp.ColumnDef) -> exp.Expr:
    """`value`'s field `field`, typed as the field is."""
    access = exp.Dot(this=value.copy(), expression=exp.to_identifier(field.name, quoted=True))
    access.type = field.args.get("kind")
    return access


def _field_text(field: exp.Expr) -> exp.Expr:
    """A field's text as PostgreSQL's output function of its type gives it."""
    if field.is_type(exp.DataType.Type.STRUCT):
        return _record(field)
    if field.is_type(exp.DataType.Type.BOOLEAN):
        return exp.If(this=field, true=exp.Literal.string("t"), false=exp.Literal.string("f"))
    if field.is_type(*exp.DataType.TEXT_TYPES):
        return field
    if field.is_type(exp.DataType.Type.BINARY, exp.DataType.Type.VARBINARY):
        hex_digits = exp.Anonymous(this="lower", expressions=[exp.Anonymous(this="hex", expressions=[field])])
        return exp.Anonymous(this="concat", expressions=[exp.Literal.string("\\x"), hex_digits])
    cast = exp.cast(field, _TEXT)
    cast.type = exp.DataType.build("TEXT")
    return cast


def _quoting() -> exp.Lambda:
    """`field_text -> …`: a field's text (NULL as empty) double-quoted, `"` and `\\`
    doubled, when record_out would quote it."""
    text = exp.column(_FIELD)
    escaped = exp.Anonymous(
        this="replace",
        expressions=[
            exp.Anonymous(
                this="replace", expressions=[text.copy(), exp.Literal.string("\\"), exp.Literal.string("\\\\")]
            ),
            exp.Literal.string('"'),
            exp.Literal.string('""'),
        ],
    )
    needs_quotes = exp.or_(
        exp.EQ(this=text.copy(), expression=exp.Literal.string("")),
        exp.RegexpLike(this=text.copy(), expression=exp.Literal.string(_SPECIAL)),
    )
    body = exp.If(
        this=exp.Anonymous(this="isnull", expressions=[text.copy()]),
        true=exp.Literal.string(""),
        false=exp.If(
            this=needs_quotes,
            true=exp.Anonymous(
                this="concat", expressions=[exp.Literal.string('"'), escaped, exp.Literal.string('"')]
            ),
            false=text,
        ),
    )
    return exp.Lambda(this=body, expressions=[exp.to_identifier(_FIELD)])
