"""jsonb on Spark, where it is a VARIANT (sources parse it so; `QueryRenderer` parses
tables' stored text).

* Operators: `->` / `#>` extract a jsonb (a JSON `null` stays jsonb `null`, a missing key
  or index is NULL), `->>` / `#>>` its text (a string unquoted, JSON `null` as NULL),
  `jsonb_typeof` names its JSON type, `jsonb::text` is its JSON text and `text::jsonb`
  parses.
* Comparisons: Spark can neither compare nor order a VARIANT. Where PostgreSQL tests jsonb
  values for equality (`=`, `<>`, IN, GROUP BY, DISTINCT, `count(DISTINCT …)`, PARTITION
  BY) they are compared by their JSON text as `to_json` writes it, which is canonical
  (object keys sorted, numbers normalised: equal values, equal text); where it orders them
  (ORDER BY, `<`, …) by a key in PostgreSQL's order of JSON types — object > array >
  boolean > number > string > null — numbers by value, strings by text, arrays and
  objects by size and then (where PostgreSQL goes element by element) by JSON text.
"""

from __future__ import annotations

import re

from sqlglot import exp

from sluice.errors import FeatureNotSupported

_JSON_TYPES = (exp.DataType.Type.JSON, exp.DataType.Type.JSONB)
_EXTRACTS = {
    exp.JSONExtract: False,
    exp.JSONBExtract: False,
    exp.JSONExtractScalar: True,
    exp.JSONBExtractScalar: True,
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# schema_of_variant's names → jsonb_typeof's (every other scalar is a JSON number).
_JSON_TYPEOF = {"OBJECT": "object", "ARRAY": "array", "STRING": "string", "BOOLEAN": "boolean", "VOID": "null"}
# PostgreSQL's order of JSON types, lowest first.
_TYPE_ORDER = ("null", "string", "number", "boolean", "array", "object")
_EQUALITIES = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)
_ORDERINGS = (exp.GT, exp.GTE, exp.LT, exp.LTE)


def compile_jsonb(query: exp.Expression) -> None:
    """`query`'s jsonb comparisons, operators and casts in Spark's terms, in place."""
    _comparisons(query)
    _operators(query)


# ---------------------------------------------------------------- comparisons


def _comparisons(query: exp.Expression) -> None:
    """While the tree still has its types: every place jsonb values are compared."""
    for node in query.find_all(exp.Union, exp.Intersect, exp.Except):
        deduplicates = node.args.get("distinct") or not isinstance(node, exp.Union)
        if deduplicates and any(_is_jsonb(s.unalias()) for s in node.selects):
            kind = type(node).__name__.upper()
            raise FeatureNotSupported(f"{kind} over jsonb columns is not supported yet (UNION ALL is)")
    for select in list(query.find_all(exp.Select)):
        _distinct_as_grouping(select)
        _group_by_text(select)
    for node in list(query.find_all(exp.Distinct, exp.Window)):
        for part in node.args.get("expressions") or node.args.get("partition_by") or []:
            if _is_jsonb(part):
                part.replace(_text(part.copy()))
    for node in list(query.find_all(*_EQUALITIES, *_ORDERINGS, exp.In)):
        _compare(node)
    for ordered in list(query.find_all(exp.Ordered)):
        if _is_jsonb(ordered.this):
            ordered.set("this", _sort_key(ordered.this))


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
                    node.replace(_call("parse_json", _text(written.copy())))


def _compare(node: exp.Expression) -> None:
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


def _as_jsonb(value: exp.Expression) -> exp.Expression:
    """`value`, a jsonb; text compared with a jsonb is read as one."""
    return value if _is_jsonb(value) else _call("parse_json", value)


def _text(value: exp.Expression) -> exp.Expression:
    """A jsonb's canonical JSON text."""
    return _call("to_json", _as_jsonb(value))


def _sort_key(value: exp.Expression) -> exp.Expression:
    value = _as_jsonb(value)
    schema = _call("schema_of_variant", value)

    def get(as_type: str) -> exp.Expression:
        return _call("try_variant_get", value.copy(), exp.Literal.string("$"), exp.Literal.string(as_type))

    def rank(name: str) -> exp.Expression:
        return exp.Literal.number(_TYPE_ORDER.index(name))

    ranks = [exp.If(this=_kind_is(schema, prefix), true=rank(name)) for prefix, name in _JSON_TYPEOF.items()]
    fields = {
        "type": exp.Case(ifs=ranks, default=rank("number")),
        # Before the number: a string's text decides, though "10" also reads as 10.
        "string": exp.Case(ifs=[exp.If(this=_kind_is(schema, "STRING"), true=get("string"))]),
        "number": get("double"),
        "size": exp.func("coalesce", _call("array_size", get("array<variant>")), _call("size", get("map<string,variant>"))),
        "text": _call("to_json", value.copy()),
    }
    key = _call("named_struct", *(a for name, v in fields.items() for a in (exp.Literal.string(name), v)))
    return exp.Case(ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null())], default=key)


def _kind_is(schema: exp.Expression, prefix: str) -> exp.Expression:
    """Whether a `schema_of_variant` result names the JSON type `prefix` (`_JSON_TYPEOF`)."""
    return _call("startswith", schema.copy(), exp.Literal.string(prefix))


def _call(name: str, *arguments: exp.Expression) -> exp.Expression:
    """A Spark function call as written (sqlglot would drop `parse_json` for Spark)."""
    return exp.Anonymous(this=name, expressions=list(arguments))


def _is_jsonb(node: exp.Expression) -> bool:
    if isinstance(node, (exp.JSONExtractScalar, exp.JSONBExtractScalar)):  # sqlglot types `#>>` jsonb
        return False
    if isinstance(node, exp.Paren):
        return _is_jsonb(node.this)
    if isinstance(node, exp.Cast):
        return node.to.is_type(*_JSON_TYPES)
    if isinstance(node, (exp.JSONExtract, exp.JSONBExtract)) or node.is_type(*_JSON_TYPES):
        return True
    if isinstance(node, exp.Column) and not node.table:  # an output's alias (ORDER BY x)
        select = node.find_ancestor(exp.Select)
        outputs = select.expressions if select is not None else []
        return any(isinstance(o, exp.Alias) and o.alias == node.name and _is_jsonb(o.this) for o in outputs)
    return False


# ---------------------------------------------------------------- operators and casts


def _operators(query: exp.Expression) -> None:
    """The jsonb operators, functions and casts as Spark's VARIANT functions, in place
    (innermost first: an outer operator's operand is then already rewritten)."""
    nodes = [n for n in query.find_all(*_EXTRACTS, exp.Anonymous, exp.Cast) if _is_jsonb_operation(n)]
    for node in reversed(nodes):
        node.replace(_json_sql(node))


def _is_jsonb_operation(node: exp.Expression) -> bool:
    """Whether `node` is a jsonb operator, function or cast the operator pass rewrites."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower() == "jsonb_typeof"
    if isinstance(node, exp.Cast):
        return node.to.is_type(*_JSON_TYPES) or node.this.is_type(*_JSON_TYPES)
    return True


def _json_sql(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Anonymous):
        return _typeof(node.expressions[0])
    if isinstance(node, exp.Cast):
        if node.to.is_type(*_JSON_TYPES):
            parse = "try_parse_json" if isinstance(node, exp.TryCast) else "parse_json"
            return _call(parse, node.this)
        if node.to.is_type(*exp.DataType.TEXT_TYPES):
            return _call("to_json", node.this)
        return node
    path = _variant_path(node.expression)
    arguments = [node.this, exp.Literal.string(path)]
    if _EXTRACTS[type(node)]:
        arguments.append(exp.Literal.string("string"))
    return exp.func("try_variant_get", *arguments)


def _variant_path(path: exp.Expression) -> str:
    """A `->` operand (key or index) or a `#>` text-array path as a VARIANT path."""
    if isinstance(path, exp.JSONPath):
        steps = []
        for part in path.expressions:
            if isinstance(part, exp.JSONPathKey):
                steps.append(str(part.this))
            elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
                steps.append(part.this)
            elif not isinstance(part, exp.JSONPathRoot):
                raise FeatureNotSupported(f"jsonb path {path.sql()} is not supported")
    elif isinstance(path, exp.Literal) and path.is_string:
        text = path.this.strip()
        if not (text.startswith("{") and text.endswith("}")):
            raise FeatureNotSupported(f"malformed jsonb path {text!r}: expected a text array such as '{{a,0}}'")
        steps = [int(s) if s.strip().isdigit() else s.strip() for s in text[1:-1].split(",") if s.strip()]
    else:
        raise FeatureNotSupported("jsonb keys and paths must be constants")
    return "$" + "".join(_path_step(step) for step in steps)


def _path_step(step: str | int) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    if _IDENTIFIER.fullmatch(step):
        return f".{step}"
    if '"' not in step:
        return f'["{step}"]'
    if "'" not in step:
        return f"['{step}']"
    raise FeatureNotSupported(f"jsonb key {step!r} has both kinds of quote")


def _typeof(value: exp.Expression) -> exp.Expression:
    schema = _call("schema_of_variant", value)
    return exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null()),
            *(exp.If(this=_kind_is(schema, prefix), true=exp.Literal.string(name)) for prefix, name in _JSON_TYPEOF.items()),
        ],
        default=exp.Literal.string("number"),
    )
