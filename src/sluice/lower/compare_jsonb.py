"""Rule: jsonb compared by value, although Spark can neither compare nor order a VARIANT.

Where PostgreSQL tests jsonb values for equality (`=`, `<>`, IN, GROUP BY, DISTINCT,
`count(DISTINCT …)`, PARTITION BY) they are compared by their JSON text as `to_json`
writes it, which is canonical (object keys sorted, numbers normalised: equal values,
equal text); where it orders them (ORDER BY, `<`, …) by a key in PostgreSQL's order of
JSON types — object > array > boolean > number > string > null — numbers by value,
strings by text, arrays and objects by size and then (where PostgreSQL goes element by
element) by JSON text. It runs while the tree still has its types, before the jsonb
operators become VARIANT functions (`rewrite_jsonb_operators`).
"""

from __future__ import annotations

from sqlglot import exp

from sluice.errors import FeatureNotSupported
from sluice.lower.jsonb import JSON_TYPEOF, JSON_TYPES, call, kind_is

# PostgreSQL's order of JSON types, lowest first.
_TYPE_ORDER = ("null", "string", "number", "boolean", "array", "object")
_EQUALITIES = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)
_ORDERINGS = (exp.GT, exp.GTE, exp.LT, exp.LTE)


def compare_jsonb(expression: exp.Expr) -> exp.Expr:
    """Every place `expression` compares jsonb values, in place: by canonical text for
    equality, by a sort key for order. A set operation that would deduplicate jsonb rows
    (UNION, INTERSECT, EXCEPT) is refused (`FeatureNotSupported`)."""
    for operation in expression.find_all(exp.Union, exp.Intersect, exp.Except):
        deduplicates = operation.args.get("distinct") or not isinstance(operation, exp.Union)
        if deduplicates and any(_is_jsonb(s.unalias()) for s in operation.selects):
            kind = type(operation).__name__.upper()
            raise FeatureNotSupported(f"{kind} over jsonb columns is not supported yet (UNION ALL is)")
    for select in list(expression.find_all(exp.Select)):
        _distinct_as_grouping(select)
        _group_by_text(select)
    for node in list(expression.find_all(exp.Distinct, exp.Window)):
        for part in node.args.get("expressions") or node.args.get("partition_by") or []:
            if _is_jsonb(part):
                part.replace(_text(part.copy()))
    for compared in list(expression.find_all(*_EQUALITIES, *_ORDERINGS, exp.In)):
        _compare(compared)
    for ordered in list(expression.find_all(exp.Ordered)):
        if _is_jsonb(ordered.this):
            ordered.set("this", _sort_key(ordered.this))
    return expression


def _distinct_as_grouping(select: exp.Select) -> None:
    """`SELECT DISTINCT` with a jsonb output as the GROUP BY of its outputs."""
    distinct = select.args.get("distinct")
    if distinct is None or distinct.args.get("on") or select.args.get("group"):
        return
    if not any(_is_jsonb(o.unalias()) for o in select.expressions):
        return
    if any(o.find(exp.AggFunc, exp.Window) for o in select.expressions):
        raise FeatureNotSupported("SELECT DISTINCT over jsonb and aggregates is not supported yet")
    select.set("distinct", None)
    select.set("group", exp.Group(expressions=[o.unalias().copy() for o in select.expressions]))


def _group_by_text(select: exp.Select) -> None:
    """A jsonb grouping key becomes its text; what the select computes from the key, the
    key parsed back."""
    group = select.args.get("group")
    if group is None:
        return
    for key in list(group.expressions):
        if not _is_jsonb(key):
            continue
        written = key.copy()
        key.replace(_text(key.copy()))
        parts = [*select.expressions, select.args.get("having"), select.args.get("order")]
        for part in (p for p in parts if p is not None):
            for node in list(part.find_all(type(written))):
                if node == written and not node.find_ancestor(exp.AggFunc):
                    node.replace(call("parse_json", _text(written.copy())))


def _compare(node: exp.Expr) -> None:
    if isinstance(node, exp.In):
        if not _is_jsonb(node.this):
            return
        node.set("this", _text(node.this))
        node.set("expressions", [_text(e) for e in node.expressions])
        query = node.args.get("query")
        select = query.this if isinstance(query, exp.Subquery) else query
        if select is not None:
            if not isinstance(select, exp.Select) or len(select.expressions) != 1:
                raise FeatureNotSupported("IN over a jsonb subquery other than one SELECT is not supported yet")
            output = select.expressions[0]
            output.replace(exp.alias_(_text(output.unalias().copy()), output.alias_or_name))
        return
    left, right = node.this, node.expression
    if not (_is_jsonb(left) or _is_jsonb(right)):
        return
    compared = _text if isinstance(node, _EQUALITIES) else _sort_key
    node.set("this", compared(left))
    node.set("expression", compared(right))


def _as_jsonb(value: exp.Expr) -> exp.Expr:
    """`value`, a jsonb; text compared with a jsonb is read as one."""
    return value if _is_jsonb(value) else call("parse_json", value)


def _text(value: exp.Expr) -> exp.Expr:
    """A jsonb's canonical JSON text."""
    return call("to_json", _as_jsonb(value))


def _sort_key(value: exp.Expr) -> exp.Expr:
    value = _as_jsonb(value)
    schema = call("schema_of_variant", value)

    def get(as_type: str) -> exp.Expr:
        return call("try_variant_get", value.copy(), exp.Literal.string("$"), exp.Literal.string(as_type))

    def rank(name: str) -> exp.Expr:
        return exp.Literal.number(_TYPE_ORDER.index(name))

    ranks = [exp.If(this=kind_is(schema, prefix), true=rank(name)) for prefix, name in JSON_TYPEOF.items()]
    fields = {
        "type": exp.Case(ifs=ranks, default=rank("number")),
        # Before the number: a string's text decides, though "10" also reads as 10.
        "string": exp.Case(ifs=[exp.If(this=kind_is(schema, "STRING"), true=get("string"))]),
        "number": get("double"),
        "size": exp.func("coalesce", call("array_size", get("array<variant>")), call("size", get("map<string,variant>"))),
        "text": call("to_json", value.copy()),
    }
    key = call("named_struct", *(a for name, v in fields.items() for a in (exp.Literal.string(name), v)))
    return exp.Case(ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null())], default=key)


def _is_jsonb(node: exp.Expr) -> bool:
    if isinstance(node, (exp.JSONExtractScalar, exp.JSONBExtractScalar)):  # sqlglot types `#>>` jsonb
        return False
    if isinstance(node, exp.Paren):
        return _is_jsonb(node.this)
    if isinstance(node, exp.Cast):
        return node.to.is_type(*JSON_TYPES)
    if isinstance(node, (exp.JSONExtract, exp.JSONBExtract)) or node.is_type(*JSON_TYPES):
        return True
    if isinstance(node, exp.Column) and not node.table:  # an output's alias (ORDER BY x)
        select = node.find_ancestor(exp.Select)
        outputs = select.expressions if select is not None else []
        return any(isinstance(o, exp.Alias) and o.alias == node.name and _is_jsonb(o.this) for o in outputs)
    return False
