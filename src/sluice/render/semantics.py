"""PostgreSQL semantics Spark lacks, compiled into a query's sqlglot tree on its way to
Spark SQL (DESIGN.md §8).

* `x IN (SELECT …)` is NULL, not false, when nothing matches and the subquery yields a
  NULL (or `x` is NULL and the subquery yields rows); `NOT IN` follows. Spark answers
  false, so the three-valued answer is compiled out of `IN` and `EXISTS`, except where
  only truth matters (a WHERE, HAVING, ON or WHEN condition, under ANDs only).
* `x IN ()` is false and `x NOT IN ()` true, whatever `x` (SQLite's corpus asks for it;
  Spark refuses the empty list).
* A text or bytea literal IN a subquery of numbers compares as text: no match, where
  Spark would fail casting the literal to a number (as SQLite's corpus expects).
* An unconstrained `numeric` cast keeps fractional digits (ten: the scale tables store
  numeric with), where Spark's bare DECIMAL would round to an integer.
* jsonb is a Spark VARIANT (sources parse it so; `QueryRenderer` parses tables' stored
  text): `->` / `#>` extract a jsonb (a JSON `null` stays jsonb `null`, a missing key or
  index is NULL), `->>` / `#>>` its text (a string unquoted, JSON `null` as NULL),
  `jsonb_typeof` names its JSON type, `jsonb::text` is its JSON text and `text::jsonb`
  parses.
"""

from __future__ import annotations

import re

from sqlglot import exp

from sluice.errors import FeatureNotSupported

_TRUTH_ONLY = (exp.Where, exp.Having)


def spark_sql(query: exp.Expression) -> str:
    """`query` (qualified and type-annotated) as Spark SQL with PostgreSQL's semantics."""
    query = query.copy()
    _json(query)
    for cast in query.find_all(exp.Cast):
        if cast.to.is_type(exp.DataType.Type.DECIMAL) and not cast.to.expressions:
            cast.set("to", exp.DataType.build("DECIMAL(38, 10)"))
    # Innermost first: an outer IN's rewrite copies its subquery, inner INs included.
    for node in reversed(list(query.find_all(exp.In))):
        if node.args.get("query") is not None:
            _compare_as_text(node)
            if not _truth_only(node):
                node.replace(_null_aware(node))
        elif not node.expressions and not node.args.get("unnest") and not node.args.get("field"):
            node.replace(exp.false())
    return query.sql(dialect="spark")


def _truth_only(node: exp.Expression) -> bool:
    """Whether only the truth of `node` counts: NULL and false both reject the row."""
    while True:
        parent = node.parent
        if isinstance(parent, (exp.And, exp.Paren)):
            node = parent
        elif isinstance(parent, _TRUTH_ONLY):
            return True
        elif isinstance(parent, exp.Join):
            return node.arg_key == "on"
        elif isinstance(parent, exp.If):
            return node.arg_key == "this"
        else:
            return False


def _compare_as_text(node: exp.In) -> None:
    subquery = node.args["query"]
    query = subquery.this if isinstance(subquery, exp.Subquery) else subquery
    literal = isinstance(node.this, exp.HexString) or (isinstance(node.this, exp.Literal) and node.this.is_string)
    if not literal or not isinstance(query, exp.Select) or len(query.selects) != 1:
        return
    output = query.selects[0]
    value = output.this if isinstance(output, exp.Alias) else output
    if value.is_type(*exp.DataType.NUMERIC_TYPES):
        node.set("this", exp.cast(node.this, exp.DataType.Type.TEXT))
        value.replace(exp.cast(value.copy(), exp.DataType.Type.TEXT))


def _null_aware(node: exp.In) -> exp.Expression:
    """`x IN (q)` with PostgreSQL's NULLs, from Spark's two-valued IN and EXISTS."""
    subquery = node.args["query"]
    query = subquery.this if isinstance(subquery, exp.Subquery) else subquery
    value = node.this
    some_null = _with_null(query)

    def exists(q: exp.Expression) -> exp.Exists:
        return exp.Exists(this=q.copy())

    return exp.Case(
        ifs=[
            exp.If(this=node.copy(), true=exp.true()),
            exp.If(this=exp.not_(exists(query)), true=exp.false()),
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null()),
            exp.If(this=exists(some_null), true=exp.Null()),
        ],
        default=exp.false(),
    )


def _with_null(query: exp.Query) -> exp.Query:
    """The rows of a one-column query whose value is NULL."""
    output = query.selects[0] if query.selects else None
    plain = (
        isinstance(query, exp.Select)
        and output is not None
        and not any(query.args.get(k) for k in ("limit", "offset", "fetch", "group", "having"))
        and not output.find(exp.AggFunc, exp.Window)
    )
    if plain:
        value = output.this if isinstance(output, exp.Alias) else output
        return query.copy().where(exp.Is(this=value.copy(), expression=exp.Null()), copy=False)
    name = output.alias_or_name if output is not None else "_col_0"
    return (
        exp.select(exp.Literal.number(1))
        .from_(query.copy().subquery("q"))
        .where(exp.Is(this=exp.column(name, "q"), expression=exp.Null()))
    )


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


def _json(query: exp.Expression) -> None:
    """The jsonb operators, functions and casts as Spark's VARIANT functions, in place
    (innermost first: an outer operator's operand is then already rewritten)."""
    nodes = [n for n in query.find_all(*_EXTRACTS, exp.Anonymous, exp.Cast) if _is_json(n)]
    for node in reversed(nodes):
        node.replace(_json_sql(node))


def _is_json(node: exp.Expression) -> bool:
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
            return exp.func(parse, node.this)
        if node.to.is_type(*exp.DataType.TEXT_TYPES):
            return exp.func("to_json", node.this)
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
    schema = exp.func("schema_of_variant", value)
    return exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null()),
            *(
                exp.If(this=exp.func("startswith", schema.copy(), exp.Literal.string(prefix)), true=exp.Literal.string(name))
                for prefix, name in _JSON_TYPEOF.items()
            ),
        ],
        default=exp.Literal.string("number"),
    )
