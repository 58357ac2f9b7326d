"""Rule helper: one fallible operation made safe. Spark in ANSI mode raises on division by
zero, integer overflow and failed casts; each becomes the form that yields NULL instead
(a `NULLIF` divisor, `try_add` / `try_subtract` / `try_multiply`, `TRY_CAST`), and the
expression naming the error PostgreSQL would have raised on that row is returned."""

from __future__ import annotations

from sqlglot import exp

from sluice.lower.error_text import Err, text, when

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


def make_safe(node: exp.Expr) -> Err:
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
        err = when(zero, text("division by zero"))
        safe_divisor = exp.Nullif(this=divisor, expression=exp.Literal.number(0))
        safe_divisor.type = divisor.type
        node.set("expression", safe_divisor)
        return err
    if isinstance(node, exp.Binary) and type(node) in _SAFE_ARITHMETIC:
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
    return when(happened, text(f"{_INTEGERS[result]} out of range"))


def _integer_type(node: exp.Expr) -> exp.DType:
    """An integer operand's type; a literal's from its value (sqlglot calls them all INT)."""
    if isinstance(node, exp.Literal) and node.is_int and abs(int(node.this)) > 2**31 - 1:
        return exp.DataType.Type.BIGINT
    return node.type.this if node.type is not None else exp.DataType.Type.UNKNOWN


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
    return when(failed, message)


def _syntax_message(value: exp.Expr, target: exp.DType) -> exp.Expr:
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
