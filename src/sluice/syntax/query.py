"""Query bodies: the sqlglot dialect sluice reads (Materialize plus `IGNORE/ONLY ERRORS`).

`parse_query` turns the text of a SELECT/INSERT/UPDATE/DELETE or a view body into a
`QueryBody`; every sqlglot failure becomes a `ParseError` pointing into the script, and a
query nested too deeply for sqlglot's recursion a `StatementTooComplex`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.materialize import Materialize
from sqlglot.errors import ErrorLevel, SqlglotError, TokenError
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.generators.materialize import MaterializeGenerator
from sqlglot.parsers.materialize import MaterializeParser
from sqlglot.tokens import Token, TokenType

from sluice.errors import FeatureNotSupported, ParseError, Span, StatementTooComplex
from sluice.syntax.ast import QueryBody
from sluice.syntax.numbers import postgres_numbers
from sluice.syntax.splitter import find_unterminated

# `FROM IGNORE ERRORS src` reads a source's oks only, `FROM ONLY ERRORS src` its errs.
ERRORS_MODIFIER = "errors_modifier"
_MODIFIERS = {"IGNORE", "ONLY"}
_MODIFIED = {TokenType.VAR, TokenType.IDENTIFIER, TokenType.L_PAREN}

# Parentheses, brackets and CASE … END nest at most this deep in a query: sqlglot parses
# each level by recursion (about twenty Python frames), and planning and rendering walk
# the tree recursively again, so a deeper query would exhaust the interpreter's stack.
MAX_NESTING = 32
_OPENING = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE}
_CLOSING = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END}


class _PositionedError(SqlglotParseError):
    """sqlglot's ParseError plus where it happened and what was found there.

    `token` is None at the end of the text. It subclasses sqlglot's error so that the
    parser's own backtracking (which catches ParseError) keeps working.
    """

    def __init__(self, message: str, token: Token | None, end_of_text: int) -> None:
        super().__init__(message, [{"description": message}])
        self.description = message
        self.token = token
        self.end_of_text = end_of_text


class SluiceTokenizer(Materialize.Tokenizer):
    # Join words of other dialects, plain names to PostgreSQL (`FROM semi WHERE …`).
    KEYWORDS: ClassVar = {
        k: v for k, v in Materialize.Tokenizer.KEYWORDS.items() if k not in ("ANTI", "ASOF", "SEMI", "STRAIGHT_JOIN")
    }


class SluiceParser(MaterializeParser):
    # PostgreSQL has no lambdas: `f(data->'k')` applies jsonb's `->`, it does not define one.
    LAMBDAS: ClassVar = {k: v for k, v in MaterializeParser.LAMBDAS.items() if k != TokenType.ARROW}

    def _parse_select_query(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        # PostgreSQL has no FROM-first queries (DuckDB's `FROM t` for `SELECT * FROM t`):
        # `DELETE FROM FROM t` is a syntax error, not a DELETE from a subquery.
        if self._curr is not None and self._curr.token_type == TokenType.FROM:
            return None
        return super()._parse_select_query(*args, **kwargs)

    def _parse_lambda_arg(self):  # type: ignore[no-untyped-def]
        # A lambda's argument (`k => v`) is one word. Materialize's parser reads a whole
        # field, so each nested call `f(g(…))` was parsed, dropped and parsed again:
        # 2^depth work.
        if self._next is None or self._next.token_type not in self.LAMBDAS:
            return None
        return super()._parse_lambda_arg()

    def expression(self, instance, *args, **kwargs):  # type: ignore[no-untyped-def]
        # `x = SOME(SELECT …)` reads as ANY over a bare query, printed `ANY(SELECT …)`,
        # which reads back as ANY over a subquery (`ANY (SELECT …)`): make it that at once.
        bare = isinstance(instance.args.get("this"), exp.Query) and not isinstance(instance.this, exp.Subquery)
        if isinstance(instance, exp.Any) and bare:
            instance.set("this", exp.Subquery(this=instance.this))
        return super().expression(instance, *args, **kwargs)

    def _parse_types(self, check_func=False, *args, **kwargs):  # type: ignore[no-untyped-def]
        # Where an expression stands, `ARRAY[…]` is an array, never a type: sqlglot tries a
        # type first, reading the elements, then reads them again (2^depth when nested).
        if (
            check_func
            and self._curr is not None
            and self._curr.token_type == TokenType.ARRAY
            and self._next is not None
            and self._next.token_type == TokenType.L_BRACKET
        ):
            return None
        return super()._parse_types(check_func, *args, **kwargs)

    def raise_error(self, message: str, token: Token | None = None) -> None:
        # sqlglot blames the last token read when the text ran out; we blame the end.
        if token is None or token.token_type == TokenType.SENTINEL:
            token = self._curr
        if token.token_type == TokenType.SENTINEL:
            token = None
        error = _PositionedError(message, token, len(self.sql or ""))
        if self.error_level == ErrorLevel.IMMEDIATE:
            raise error
        self.errors.append(error)

    def _parse_table(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        modifier = self._match_errors_modifier()
        operand = self._curr
        table = super()._parse_table(*args, **kwargs)
        if modifier is None:
            return table
        if not isinstance(table, exp.Table):
            self.raise_error(f"{modifier} ERRORS applies to sources only", operand)
        table.set(ERRORS_MODIFIER, modifier)
        return table

    def _match_errors_modifier(self) -> str | None:
        """Consume `IGNORE ERRORS` / `ONLY ERRORS` when a name or subquery follows them.

        Anything else after them (`FROM ignore errors WHERE …`) is a table `ignore`
        aliased `errors`, as PostgreSQL reads it.
        """
        ahead = self._tokens[self._index : self._index + 3]
        if (
            len(ahead) == 3
            and ahead[0].text.upper() in _MODIFIERS
            and ahead[1].text.upper() == "ERRORS"
            and ahead[2].token_type in _MODIFIED
        ):
            self._advance(2)
            return ahead[0].text.upper()
        return None


class SluiceGenerator(MaterializeGenerator):
    def table_sql(self, expression: exp.Table, sep: str = " AS ") -> str:
        text = super().table_sql(expression, sep)
        modifier = expression.args.get(ERRORS_MODIFIER)
        return f"{modifier} ERRORS {text}" if modifier else text


def _integer_type(digits: str) -> str:
    """PostgreSQL's type for an integer literal: integer if it fits 32 bits, bigint if it
    fits 64, numeric beyond (`-2147483648` is an integer: PostgreSQL folds the sign in)."""
    value = int(digits)
    if -(2**31) <= value < 2**31:
        return "INT"
    return "BIGINT" if -(2**63) <= value < 2**63 else "DECIMAL"


def _annotate_literal(annotator, literal: exp.Literal) -> exp.Literal:
    annotator._annotate_literal(literal)
    if literal.is_int:
        negated = isinstance(literal.parent, exp.Neg)
        annotator._set_type(literal, exp.DataType.build(_integer_type(("-" if negated else "") + literal.this)))
    return literal


class Sluice(Materialize):
    Tokenizer = SluiceTokenizer
    Parser = SluiceParser
    Generator = SluiceGenerator
    # sqlglot types every integer literal INT; PostgreSQL by its magnitude.
    EXPRESSION_METADATA = {
        **Materialize.EXPRESSION_METADATA,
        exp.Literal: {"annotator": _annotate_literal},
    }


_KINDS: dict[str, tuple[type[exp.Expr], ...]] = {
    "query": (exp.Query, exp.Values),
    "subquery": (exp.Query, exp.Values),
    "INSERT": (exp.Insert,),
    "UPDATE": (exp.Update,),
    "DELETE": (exp.Delete,),
}


def parse_query(text: str, offset: int, kind: str) -> QueryBody:
    """Parse `text` (found at `offset` in the script) as a statement of `kind`.

    `kind` is "query", "subquery" (a parenthesised query, parentheses dropped), "INSERT",
    "UPDATE" or "DELETE".
    """
    span = Span(offset, offset + len(text))
    try:
        dialect = Sluice()
        tokens = _dollar_quoted_as_strings(postgres_numbers(dialect.tokenize(text), text, offset))
        _check_nesting(tokens, offset)
        expressions = dialect.parser().parse(tokens, text)
    except _PositionedError as e:
        raise _translate(e, offset) from None
    except TokenError as e:
        position, message = find_unterminated(text) or (e.start or 0, f"could not read query: {e}")
        raise ParseError(message, span=Span(offset + position, offset + position + 1)) from None
    except SqlglotError as e:
        raise ParseError(f"could not read query: {e}", span=span) from None
    except RecursionError:
        raise StatementTooComplex("the query nests expressions too deeply", span=span) from None
    expressions = [e for e in expressions if e is not None]
    if len(expressions) != 1 or not isinstance(expressions[0], _KINDS[kind]):
        raise ParseError(f"Expected {'a query' if kind.islower() else kind}", span=span)
    expression = expressions[0]
    if kind == "subquery":
        while isinstance(expression, exp.Subquery) and not expression.alias:
            expression = expression.this
    _reject_lenient_shapes(expression, offset, span)
    if isinstance(expression, exp.Update):
        _check_update_targets(expression, offset, span)
    try:
        sql = expression.sql(dialect=Sluice, comments=False)
        faithful = _reads_back(sql, expression)
    except RecursionError:
        raise StatementTooComplex("the query nests expressions too deeply", span=span) from None
    if not faithful:
        raise FeatureNotSupported(
            "sluice cannot represent this query faithfully",
            span=span,
            detail=f"sqlglot reads it as: {sql}",
        )
    return QueryBody(sql, expression, span=span)


def _dollar_quoted_as_strings(tokens: list[Token]) -> list[Token]:
    """`tokens` with every dollar-quoted string a plain string: PostgreSQL reads `$$d$$` as
    it reads `'d'`, while sqlglot reads it as a raw string, which `->` takes apart from a
    string (no cast to json) and prints as `'d'`, text it then reads otherwise."""
    return [
        Token(TokenType.STRING, t.text, t.line, t.col, t.start, t.end, t.comments)
        if t.token_type == TokenType.HEREDOC_STRING
        else t
        for t in tokens
    ]


def _check_nesting(tokens: list[Token], offset: int) -> None:
    """Refuse a query whose brackets nest deeper than `MAX_NESTING`, before sqlglot's
    recursion meets them; the caret points at the first bracket too many. Subscripts in a
    row (`a[1][2]`) nest too: sqlglot reads each inside the one before."""
    levels: list[int] = []  # per open bracket, how many levels of nesting it stands for
    depth = carried = 0
    for token, following in zip(tokens, [*tokens[1:], None]):
        if token.token_type in _OPENING:
            levels.append(carried + 1)
            depth += carried + 1
            carried = 0
            if depth > MAX_NESTING:
                start = offset + token.start
                raise StatementTooComplex(
                    f"parentheses, brackets and CASE expressions nest more than {MAX_NESTING} deep",
                    span=Span(start, offset + token.end + 1),
                )
        elif token.token_type in _CLOSING and levels:
            closed = levels.pop()
            depth -= closed
            subscript_follows = (
                token.token_type == TokenType.R_BRACKET
                and following is not None
                and following.token_type == TokenType.L_BRACKET
            )
            carried = closed if subscript_follows else 0


# Shapes sqlglot accepts leniently although they are not SQL; passed through, each would
# silently become another query (`SELECT a JOIN b` → `SELECT a, b`).
_LENIENT_SHAPES: list[tuple[type[exp.Expr] | tuple[type[exp.Expr], ...], str, Callable[[Any], object]]] = [
    (exp.Select, "JOIN requires a FROM clause", lambda e: e.args.get("joins") and not e.args.get("from_")),
    (exp.Select, "LATERAL must follow a comma or JOIN", lambda e: e.args.get("laterals")),
    (exp.Update, "UPDATE requires SET", lambda e: not e.args.get("expressions")),
    (exp.Dot, "Unexpected dot after a number", lambda e: isinstance(e.this, exp.Literal) and not e.this.is_string),
    (exp.TableAlias, "Expected comma between VALUES rows", lambda e: e.this is None and e.args.get("columns")),
    (exp.Insert, "INSERT requires VALUES or a query", lambda e: e.args.get("expression") is None and not e.args.get("default")),
    (exp.Delete, "DELETE requires FROM", lambda e: e.args.get("tables") and not e.args.get("this")),
    ((exp.Insert, exp.Update, exp.Delete), "Expected table name", lambda e: not _names_table(e.this)),
]


def _names_table(target: exp.Expr | None) -> bool:
    """Whether a write's target is a table's name (INSERT's with its column list)."""
    if isinstance(target, exp.Schema):
        target = target.this
    return isinstance(target, exp.Table) and isinstance(target.this, exp.Identifier)


def _reject_lenient_shapes(expression: exp.Expr, offset: int, span: Span) -> None:
    for node in expression.walk():
        for cls, message, bad in _LENIENT_SHAPES:
            if isinstance(node, cls) and bad(node):
                raise ParseError(message, span=_first_position(node, offset) or span)


def _check_update_targets(update: exp.Update, offset: int, span: Span) -> None:
    """UPDATE assigns to a column name with field or subscript indirection, or to a
    parenthesised list of them (PostgreSQL's `set_target`); sqlglot reads any expression
    there, which PostgreSQL's grammar refuses at its first token that is not one."""
    for assignment in update.expressions:
        for one in assignment_targets(assignment.this):
            if not _is_set_target(one):
                raise ParseError(
                    f'syntax error at or near "{_first_bad_token(one)}"',
                    span=_first_position(one, offset) or span,
                )


def assignment_targets(target: exp.Expr) -> list[exp.Expr]:
    """The targets of one UPDATE assignment: a parenthesised list is several (sqlglot
    reads a list of one as a parenthesised expression)."""
    if isinstance(target, exp.Tuple):
        return target.expressions
    return [target.this] if isinstance(target, exp.Paren) else [target]


def _is_set_target(target: exp.Expr) -> bool:
    while isinstance(target, exp.Bracket):
        target = target.this
    return isinstance(target, exp.Column) and all(isinstance(p, exp.Identifier) for p in target.parts)


def _first_bad_token(target: exp.Expr) -> str:
    """The first token of `target`'s text that cannot continue a column name with its
    indirection (`.field`, `[subscript]`)."""
    sql = target.sql(dialect=Sluice)
    name_expected, depth = True, 0
    for token in Sluice().tokenize(sql):
        text = sql[token.start : token.end + 1]
        if depth:
            depth += {TokenType.L_BRACKET: 1, TokenType.R_BRACKET: -1}.get(token.token_type, 0)
            continue
        if name_expected:
            if not _is_name(token, text):
                return text
            name_expected = False
        elif token.token_type == TokenType.DOT:
            name_expected = True
        elif token.token_type == TokenType.L_BRACKET:
            depth = 1
        else:
            return text
    return sql


def _is_name(token: Token, text: str) -> bool:
    if token.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
        return True
    return text.isidentifier() and text.upper() not in ("NULL", "TRUE", "FALSE")


def _first_position(node: exp.Expr, offset: int) -> Span | None:
    for inner in node.walk():
        start = inner.meta.get("start") if inner.meta else None
        if start is not None:
            return Span(offset + start, offset + inner.meta.get("end", start) + 1)
    return None


def _reads_back(sql: str, expression: exp.Expr) -> bool:
    """Whether canonical text parses back to itself, the property `to_sql` promises, with
    every clause `expression` has (sqlglot's printer drops some it reads: ON CONFLICT)."""
    try:
        again = sqlglot.parse(sql, dialect=Sluice)
    except SqlglotError:
        return False
    if len(again) != 1 or again[0] is None or again[0].sql(dialect=Sluice, comments=False) != sql:
        return False
    return _clauses(again[0]) == _clauses(expression)


def _clauses(expression: exp.Expr) -> set[str]:
    return {name for name, value in expression.args.items() if value not in (None, False, [])}


def _translate(error: _PositionedError, offset: int) -> ParseError:
    description, token = error.description, error.token
    if token is None:
        start = offset + error.end_of_text
        span, found = Span(start, start), "EOF"
    else:
        start = offset + max(token.start, 0)
        span, found = Span(start, max(start, offset + token.end + 1)), _describe_token(token)
    # sqlglot sometimes appends its own token repr ("… but got <Token …>"): ours replaces it.
    description = description.split(" but got ", 1)[0]
    if description.startswith("Required keyword"):
        message = f"Expected an expression, found {found}"
    elif description.startswith(("Expecting ", "Expected ")):
        wanted = description.split(" ", 1)[1].rstrip(".")
        message = f"Expected {_PUNCTUATION.get(wanted, wanted)}, found {found}"
    elif description.startswith("Invalid expression / Unexpected token"):
        message = f"Unexpected {found}"
    elif description.endswith("applies to sources only"):
        message = description
    else:
        message = f"{description}, found {found}"
    return ParseError(message, span=span)


_PUNCTUATION = {
    "(": "left parenthesis",
    ")": "right parenthesis",
    "[": "left square bracket",
    "]": "right square bracket",
    ",": "comma",
}


def _describe_token(token: Token) -> str:
    if token.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
        return f'identifier "{token.text}"'
    if token.token_type == TokenType.STRING:
        return f"string literal '{token.text}'"
    if token.token_type == TokenType.NUMBER:
        return f'number "{token.text}"'
    if token.text in _PUNCTUATION:
        return _PUNCTUATION[token.text]
    return token.text.upper() if token.text.isalpha() else f'"{token.text}"'
