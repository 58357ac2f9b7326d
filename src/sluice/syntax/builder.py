"""Lark parse tree → typed AST, one method per grammar rule.

The builder knows the statement's offset in the whole script so every span it makes is
absolute. Query bodies captured by the grammar go to sqlglot through `parse_query`.
"""

from __future__ import annotations

from lark import Token, Tree

from sluice.errors import InternalError, Span
from sluice.syntax import ast
from sluice.syntax.keywords import TYPE_WORD_RESERVED
from sluice.syntax.query import parse_query

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# Option rules are aliased alternatives (`-> broker`); the alias names the option.
_OPTION_KINDS: dict[str, type[ast.Option]] = {
    **dict.fromkeys(
        [
            "broker",
            "brokers",
            "security_protocol",
            "sasl_mechanisms",
            "sasl_username",
            "sasl_password",
            "ssl_certificate_authority",
            "ssl_certificate",
            "ssl_key",
            "url",
            "username",
            "password",
        ],
        ast.ConnectionOption,
    ),
    **dict.fromkeys(
        [
            "topic",
            "start_offset",
            "start_timestamp",
            "group_id_prefix",
            "topic_partition_count",
            "topic_metadata_refresh_interval",
        ],
        ast.KafkaOption,
    ),
    **dict.fromkeys(
        [
            "redirect_errors",
            "timeline",
            "epoch_ms_timeline",
            "error_tolerance",
            "timestamp_interval",
            "retry_timeout",
            "retry_delay_max",
        ],
        ast.WithOption,
    ),
}
_LIST_OPTIONS = {"brokers", "start_offset"}

# Tokens that carry data; every other token is a keyword or punctuation, used only for spans.
_DATA_TERMINALS = {
    "IDENTIFIER",
    "QUOTED_IDENTIFIER",
    "STRING",
    "INTEGER",
    "DECIMAL",
    "SIGN",
    "QUERY",
    "PAREN_QUERY",
    "INSERT_STATEMENT",
    "UPDATE_STATEMENT",
    "DELETE_STATEMENT",
}
# Rules whose keywords are their value (`MATERIALIZED VIEW`, `CASCADE`, `TRUE`).
_KEYWORD_RULES = {
    "include_kind",
    "tolerance_word",
    "object_kinds",
    "object_kind",
    "drop_behavior",
    "explain_stage",
    "explain_format",
    "boolean",
}


def _present(children: list) -> list:
    """Children without Lark's placeholders for absent optional parts."""
    return [c for c in children if c is not None]


def _keyword_node(cls: type[ast.Node]):
    """The builder method for a rule that is only keywords and becomes a bare `cls`."""

    def build(self, children, span):
        return cls(span=span)

    return build


def _format_node(rule: str) -> type[ast.Node]:
    """The node of a format rule that has no builder method: the AST class named after the
    rule (`text_format` → `TextFormat`), made from the rule's children in order. A format
    whose node takes its children as they come (TEXT, BYTES) needs no method here, so adding
    one touches the grammar, its node and the format registry only."""
    return getattr(ast, "".join(part.capitalize() for part in rule.split("_")))


def _constraint(kind: str):
    """The builder method for a column constraint that is only keywords."""

    def build(self, children, span):
        return ast.ColumnConstraint(kind, span=span)

    return build


def _placed(token: Token) -> tuple[int, int]:
    """Where `token` starts and ends in the statement's text (the lexer places every token)."""
    if token.start_pos is None or token.end_pos is None:
        raise InternalError.bug(f"token {token.type} without a position")
    return token.start_pos, token.end_pos


class Builder:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def build(self, tree: Tree):
        """Children first, then the method named after the rule (or its alias); without one,
        a format rule makes its node (`_format_node`) and any other rule an option."""
        return self._build(tree)[0]

    def _build(self, tree: Tree) -> tuple[object, int, int]:
        """The built node and the text range of every token under `tree`, keywords included."""
        keep_keywords = tree.data in _KEYWORD_RULES
        children: list = []
        start = end = -1
        for child in tree.children:
            if child is None:
                children.append(None)
                continue
            if isinstance(child, Tree):
                value, child_start, child_end = self._build(child)
                children.append(value)
            else:
                child_start, child_end = _placed(child)
                if keep_keywords or child.type in _DATA_TERMINALS:
                    children.append(child)
            if start < 0:
                start = child_start
            end = child_end
        span = Span(start + self.offset, end + self.offset)
        method = getattr(self, tree.data, None)
        if method is not None:
            return method(children, span), start, end
        if tree.data.endswith("_format"):
            return _format_node(tree.data)(*children, span=span), start, end
        return self.option(tree.data, children, span), start, end

    def token_span(self, token: Token) -> Span:
        start, end = _placed(token)
        return Span(start + self.offset, end + self.offset)

    def ident(self, token: Token) -> ast.Ident:
        if token.type == "QUOTED_IDENTIFIER":
            value = token.value[1:-1].replace('""', '"')
        else:
            value = token.value.translate(_ASCII_LOWER)
        return ast.Ident(value, span=self.token_span(token))

    def value(self, child) -> ast.Node:
        return self.ident(child) if isinstance(child, Token) else child

    def option(self, data, children, span):
        kind = _OPTION_KINDS[data]
        values = [self.value(c) for c in children]
        if data in _LIST_OPTIONS:
            value = ast.ValueList(tuple(values), span=values[0].span.cover(values[-1].span))
        else:
            (value,) = values
        return kind(data.upper().replace("_", " "), value, span=span)

    # ------------------------------------------------------------ shared pieces

    def object_name(self, children, span):
        return ast.ObjectName(tuple(self.ident(t) for t in children), span=span)

    def column_list(self, children, span):
        return tuple(self.ident(t) for t in children)

    def if_not_exists(self, children, span):
        return True

    def alias(self, children, span):
        return self.ident(children[0])

    def single(self, children, span):
        """Rules that only wrap one part in keywords."""
        (child,) = children
        return child

    envelope = sink_envelope = csv_delimiter = wire_format = value_decoding_errors = single

    if_exists = materialized = json_array = if_not_exists

    def string(self, children, span):
        (token,) = children
        return ast.StringLiteral(token.value[1:-1].replace("''", "'"), span=span)

    def signed_int(self, children, span):
        text = "".join(t.value for t in children)
        return ast.NumberLiteral(str(int(text)), span=span)

    def unsigned_int(self, children, span):
        return ast.NumberLiteral(str(int(children[0].value)), span=span)

    def signed_number(self, children, span):
        sign, digits = (children if len(children) == 2 else [None, children[0]])
        text = digits.value if digits.type == "DECIMAL" else str(int(digits.value))
        if sign is not None and sign.value == "-":
            text = "-" + text
        return ast.NumberLiteral(text, span=span)

    def boolean(self, children, span):
        return ast.BooleanLiteral(children[0].value.upper() == "TRUE", span=span)

    null = _keyword_node(ast.NullLiteral)

    def tolerance_word(self, children, span):
        return ast.KeywordValue(children[0].value.upper(), span=span)

    def secret_ref(self, children, span):
        return ast.SecretRef(children[0], span=span)

    # ------------------------------------------------------------ connections

    def create_connection(self, children, span):
        if_not_exists, name, (connection_type, options), validate = children
        return ast.CreateConnection(
            name,
            connection_type,
            tuple(options),
            if_not_exists=bool(if_not_exists),
            validate=validate,
            span=span,
        )

    def validate_option(self, children, span):
        given = children[-1]  # all None for a bare VALIDATE
        return True if given is None else given.value

    def validate_connection(self, children, span):
        return ast.ValidateConnection(children[0], span=span)

    def kafka_connection(self, children, span):
        return ast.CreateConnection.KAFKA, children

    def csr_connection(self, children, span):
        return ast.CreateConnection.CONFLUENT_SCHEMA_REGISTRY, children

    # ------------------------------------------------------------ secrets

    def create_secret(self, children, span):
        if_not_exists, name, value = children
        return ast.CreateSecret(name, value, if_not_exists=bool(if_not_exists), span=span)

    def alter_secret(self, children, span):
        if_exists, name, value = children
        return ast.AlterSecret(name, value, if_exists=bool(if_exists), span=span)

    # ------------------------------------------------------------ sources

    def create_source(self, children, span):
        (
            if_not_exists,
            name,
            columns,
            connection,
            kafka_options,
            format_spec,
            include,
            envelope,
            external_references,
            with_options,
        ) = children
        return ast.CreateSource(
            name,
            connection,
            kafka_options,
            if_not_exists=bool(if_not_exists),
            columns=columns or (),
            format=format_spec,
            include=include or (),
            envelope=envelope,
            external_references=external_references,
            with_options=with_options or (),
            span=span,
        )

    def for_all_tables(self, children, span):
        return ast.ExternalReferences(span=span)

    def for_tables(self, children, span):
        return ast.ExternalReferences(tuple(children), span=span)

    def table_reference(self, children, span):
        name, alias = children
        return ast.TableReference(name, alias, span=span)

    def kafka_options(self, children, span):
        return tuple(children)

    source_with_options = include_clause = decoding_errors = kafka_options

    def bare_format(self, children, span):
        return ast.BareFormat(children[0], span=span)

    def key_value_format(self, children, span):
        key, value = children
        return ast.KeyValueFormat(key, value, span=span)

    def json_format(self, children, span):
        return ast.JsonFormat(array=bool(children[0]), span=span)

    def csv_format(self, children, span):
        shape, delimiter = children
        if isinstance(shape, tuple):
            return ast.CsvFormat(header=shape, delimiter=delimiter, span=span)
        return ast.CsvFormat(column_count=shape, delimiter=delimiter, span=span)

    def csv_column_count(self, children, span):
        return int(children[0].text)

    def csv_header(self, children, span):
        return children[0]

    def avro_format(self, children, span):
        return ast.AvroFormat(children[0], span=span)

    def inline_schema(self, children, span):
        schema, wire_format = children
        flag = None if wire_format is None else wire_format.value
        return ast.InlineSchema(schema, flag, span=span)

    def csr_schema(self, children, span):
        return ast.CsrSchema(children[0], span=span)

    def include_metadata(self, children, span):
        kind, alias = children
        return ast.IncludeMetadata(kind, alias, span=span)

    def include_kind(self, children, span):
        return children[0].value.upper()

    envelope_none = _keyword_node(ast.EnvelopeNone)

    envelope_debezium = _keyword_node(ast.EnvelopeDebezium)

    def envelope_upsert(self, children, span):
        return ast.EnvelopeUpsert(children[0] or (), span=span)

    sink_upsert = _keyword_node(ast.EnvelopeUpsert)

    def inline_errors(self, children, span):
        return ast.InlineErrors(children[0], span=span)

    propagate_errors = _keyword_node(ast.PropagateErrors)

    # ------------------------------------------------------------ sinks

    def create_sink(self, children, span):
        if_not_exists, name, from_, connection, kafka_options, key, format_spec, envelope = (
            children
        )
        columns, not_enforced = key or ((), False)
        return ast.CreateSink(
            name,
            from_,
            connection,
            kafka_options,
            format_spec,
            envelope,
            if_not_exists=bool(if_not_exists),
            key=columns,
            key_not_enforced=not_enforced,
            span=span,
        )

    def sink_key(self, children, span):
        columns, not_enforced = children
        return columns, not_enforced is not None

    def not_enforced(self, children, span):
        return True

    # ------------------------------------------------------------ tables

    def create_index(self, children, span):
        unique, if_not_exists, name, on, *columns = children
        return ast.CreateIndex(
            name, on, tuple(columns), unique=bool(unique), if_not_exists=bool(if_not_exists), span=span
        )

    def unique_index(self, children, span):
        return True

    def index_column(self, children, span):
        column, order = children
        return ast.IndexColumn(self.ident(column), order, span=span)

    def ascending(self, children, span):
        return "ASC"

    def descending(self, children, span):
        return "DESC"

    def create_table(self, children, span):
        if_not_exists, name, *elements = children
        return ast.CreateTable(
            name,
            tuple(e for e in elements if isinstance(e, ast.ColumnDef)),
            tuple(e for e in elements if isinstance(e, ast.TableConstraint)),
            if_not_exists=bool(if_not_exists),
            span=span,
        )

    def column_def(self, children, span):
        name, data_type, *constraints = children
        return ast.ColumnDef(self.ident(name), data_type, tuple(constraints), span=span)

    def data_type(self, children, span):
        words = [self.type_word(c) for c in children if isinstance(c, Token)]
        modifiers = next((c for c in children if isinstance(c, tuple)), ())
        dims = children.count("[]")
        return ast.DataType(" ".join(words), modifiers, dims, span=span)

    def type_word(self, token: Token) -> str:
        """A word of a type name as canonical SQL: quoted only when it has to be."""
        return ast.quote_ident(self.ident(token).value, TYPE_WORD_RESERVED)

    def type_modifiers(self, children, span):
        return tuple(int(c.text) for c in children)

    def array_suffix(self, children, span):
        return "[]"

    not_null = _constraint("NOT NULL")
    nullable = _constraint("NULL")
    primary_key = _constraint("PRIMARY KEY")
    unique = _constraint("UNIQUE")

    def default(self, children, span):
        return ast.ColumnConstraint("DEFAULT", children[0], span=span)

    def primary_key_constraint(self, children, span):
        return ast.TableConstraint("PRIMARY KEY", children[0], span=span)

    def unique_constraint(self, children, span):
        return ast.TableConstraint("UNIQUE", children[0], span=span)

    # ------------------------------------------------------------ queries and views

    def query(self, token: Token, kind: str) -> ast.QueryBody:
        return parse_query(token.value, self.offset + _placed(token)[0], kind)

    def create_view(self, children, span):
        materialized, if_not_exists, name, columns, token = children
        return ast.CreateView(
            name,
            self.query(token, "query"),
            materialized=bool(materialized),
            if_not_exists=bool(if_not_exists),
            columns=columns or (),
            span=span,
        )

    def select(self, children, span):
        return ast.Select(self.query(children[0], "query"), span=span)

    def insert(self, children, span):
        return ast.Insert(self.query(children[0], "INSERT"), span=span)

    def update(self, children, span):
        return ast.Update(self.query(children[0], "UPDATE"), span=span)

    def delete(self, children, span):
        return ast.Delete(self.query(children[0], "DELETE"), span=span)

    def subscribe(self, children, span):
        (target,) = _present(children)
        if isinstance(target, Token):
            target = self.query(target, "subquery")
        return ast.Subscribe(target, span=span)

    # ------------------------------------------------------------ catalog commands

    def object_kinds(self, children, span):
        return " ".join(t.value.upper() for t in children)

    object_kind = drop_behavior = explain_stage = object_kinds

    def explain_format(self, children, span):
        return " ".join(t.value.upper() for t in children[1:])  # after AS

    def show_objects(self, children, span):
        return ast.ShowObjects(children[0], span=span)

    def show_columns(self, children, span):
        return ast.ShowColumns(children[0], span=span)

    def show_source_statistics(self, children, span):
        return ast.ShowSourceStatistics(children[0], span=span)

    def statistics_for(self, children, span):
        return children[0]

    def show_create(self, children, span):
        kind, name = children
        return ast.ShowCreate(kind, name, span=span)

    def drop(self, children, span):
        kind, if_exists, *names, behavior = children
        return ast.Drop(
            kind,
            tuple(names),
            if_exists=bool(if_exists),
            cascade=behavior == "CASCADE",
            span=span,
        )

    def explain(self, children, span):
        stage, modifiers, format_, statement = children
        return ast.Explain(statement, stage, modifiers or (), format_, span=span)

    def explain_modifiers(self, children, span):
        return tuple(children)

    def explain_modifier(self, children, span):
        return " ".join(t.value.lower() for t in children)

    def explain_view(self, children, span):
        materialized, name = children
        return ast.ExplainView(name, materialized=bool(materialized), span=span)
