"""The typed syntax tree: one frozen dataclass per grammar rule, and its canonical SQL.

A node is named after the rule it comes from (`CreateSource` ↔ `create_source`). Spans are
kept on every parsed node but are not part of equality or `repr`, so a tree re-parsed from
its own `to_sql()` compares equal to the original. Query bodies stay sqlglot expressions
(`QueryBody`); their canonical text is sqlglot's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

from sluice.errors import InternalError, Span
from sluice.syntax.keywords import RESERVED

_BARE_IDENT = re.compile(r"[a-z_][a-z0-9_$]*")
# What is shown in place of a secret's value.
REDACTED = "********"


def quote_ident(name: str, reserved: frozenset[str] = RESERVED) -> str:
    """`name` as SQL: bare when it re-reads as itself, otherwise double-quoted."""
    if _BARE_IDENT.fullmatch(name) and name.upper() not in reserved:
        return name
    return '"' + name.replace('"', '""') + '"'


def quote_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class Node:
    span: Span | None = field(default=None, compare=False, repr=False, kw_only=True)

    def to_sql(self) -> str:
        raise NotImplementedError(type(self).__name__)


N = TypeVar("N", bound=Node)


@dataclass(frozen=True)
class Statement(Node):
    """A top-level statement."""

    def redacted(self) -> Statement:
        """The statement as it may be shown or stored: a secret's value replaced."""
        return self


def _csv(nodes: tuple[Node, ...]) -> str:
    return ", ".join(n.to_sql() for n in nodes)


def _clause(prefix: str, node: Node | None) -> str:
    return f" {prefix}{node.to_sql()}" if node is not None else ""


# ---------------------------------------------------------------- names and values


@dataclass(frozen=True)
class Ident(Node):
    """An identifier, already normalised: unquoted ones are folded to lower case."""

    value: str

    def to_sql(self) -> str:
        return quote_ident(self.value)


@dataclass(frozen=True)
class ObjectName(Node):
    parts: tuple[Ident, ...]

    @property
    def name(self) -> str:
        return self.parts[-1].value

    def to_sql(self) -> str:
        return ".".join(p.to_sql() for p in self.parts)

    def __str__(self) -> str:
        return ".".join(p.value for p in self.parts)


@dataclass(frozen=True)
class StringLiteral(Node):
    value: str

    def to_sql(self) -> str:
        return quote_string(self.value)


@dataclass(frozen=True)
class NumberLiteral(Node):
    """A numeric literal, kept as its text (sign included) so nothing is lost to floats."""

    text: str

    @property
    def value(self) -> int | float:
        try:
            return int(self.text)
        except ValueError:
            return float(self.text)

    def to_sql(self) -> str:
        return self.text


@dataclass(frozen=True)
class BooleanLiteral(Node):
    value: bool

    def to_sql(self) -> str:
        return "true" if self.value else "false"


@dataclass(frozen=True)
class NullLiteral(Node):
    def to_sql(self) -> str:
        return "NULL"


@dataclass(frozen=True)
class KeywordValue(Node):
    """An option value spelled as a keyword, such as `ALL` in `ERROR TOLERANCE = ALL`."""

    word: str

    def to_sql(self) -> str:
        return self.word


@dataclass(frozen=True)
class SecretRef(Node):
    name: ObjectName

    def to_sql(self) -> str:
        return f"SECRET {self.name.to_sql()}"


@dataclass(frozen=True)
class ValueList(Node):
    items: tuple[Node, ...]

    def to_sql(self) -> str:
        return f"({_csv(self.items)})"


Literal = StringLiteral | NumberLiteral | BooleanLiteral | NullLiteral


@dataclass(frozen=True)
class Option(Node):
    """`NAME [=] value`; the subclasses say which clause the option belongs to."""

    name: str
    value: Node

    def to_sql(self) -> str:
        return f"{self.name} = {self.value.to_sql()}"

    # The value as the node the grammar gives for this option's name (`TOPIC` a string,
    # `START OFFSET` a list of numbers): asking for another is a bug in sluice, an internal error.
    @property
    def string(self) -> StringLiteral:
        return self._value(StringLiteral)

    @property
    def word(self) -> str:
        """The text of a value given as a string or a bare word (`SECURITY PROTOCOL = SSL`)."""
        if isinstance(self.value, (StringLiteral, Ident)):
            return self.value.value
        return self._value(StringLiteral).value  # an internal error naming what it is

    @property
    def number(self) -> NumberLiteral:
        return self._value(NumberLiteral)

    @property
    def boolean(self) -> BooleanLiteral:
        return self._value(BooleanLiteral)

    @property
    def object_name(self) -> ObjectName:
        return self._value(ObjectName)

    @property
    def strings(self) -> tuple[StringLiteral, ...]:
        return self._items(StringLiteral)

    @property
    def numbers(self) -> tuple[NumberLiteral, ...]:
        return self._items(NumberLiteral)

    def _value(self, wanted: type[N]) -> N:
        return _narrowed(self.value, wanted, f"option {self.name}")

    def _items(self, wanted: type[N]) -> tuple[N, ...]:
        items = self._value(ValueList).items
        return tuple(_narrowed(item, wanted, f"an item of option {self.name}") for item in items)


def _narrowed(node: Node, wanted: type[N], what: str) -> N:
    if isinstance(node, wanted):
        return node
    raise InternalError.bug(f"{what} is {type(node).__name__}, not {wanted.__name__}")


@dataclass(frozen=True)
class ConnectionOption(Option):
    pass


@dataclass(frozen=True)
class KafkaOption(Option):
    pass


@dataclass(frozen=True)
class WithOption(Option):
    pass


# ---------------------------------------------------------------- connections


@dataclass(frozen=True)
class CreateConnection(Statement):
    name: ObjectName
    connection_type: str  # "KAFKA" | "CONFLUENT SCHEMA REGISTRY"
    options: tuple[ConnectionOption, ...]
    if_not_exists: bool = False
    validate: bool | None = None  # WITH (VALIDATE = …), None when not given

    KAFKA: ClassVar[str] = "KAFKA"
    CONFLUENT_SCHEMA_REGISTRY: ClassVar[str] = "CONFLUENT SCHEMA REGISTRY"

    def to_sql(self) -> str:
        ine = " IF NOT EXISTS" if self.if_not_exists else ""
        validate = "" if self.validate is None else f" WITH (VALIDATE = {str(self.validate).lower()})"
        return (
            f"CREATE CONNECTION{ine} {self.name.to_sql()} "
            f"TO {self.connection_type} ({_csv(self.options)}){validate}"
        )


@dataclass(frozen=True)
class ValidateConnection(Statement):
    name: ObjectName

    def to_sql(self) -> str:
        return f"VALIDATE CONNECTION {self.name.to_sql()}"


# ---------------------------------------------------------------- secrets


@dataclass(frozen=True)
class SecretStatement(Statement):
    """A statement that gives a secret's value (CREATE or ALTER SECRET): the value is left
    out of `repr` and dumps, and `redacted` replaces it."""

    name: ObjectName
    value: StringLiteral = field(repr=False)

    def redacted(self) -> SecretStatement:
        return replace(self, value=StringLiteral(REDACTED, span=self.value.span))


@dataclass(frozen=True)
class CreateSecret(SecretStatement):
    if_not_exists: bool = False

    def to_sql(self) -> str:
        ine = " IF NOT EXISTS" if self.if_not_exists else ""
        return f"CREATE SECRET{ine} {self.name.to_sql()} AS {self.value.to_sql()}"


@dataclass(frozen=True)
class AlterSecret(SecretStatement):
    """A new value for an existing secret."""

    if_exists: bool = False

    def to_sql(self) -> str:
        ie = " IF EXISTS" if self.if_exists else ""
        return f"ALTER SECRET{ie} {self.name.to_sql()} AS {self.value.to_sql()}"


# ---------------------------------------------------------------- formats


@dataclass(frozen=True)
class TextFormat(Node):
    def to_sql(self) -> str:
        return "TEXT"


@dataclass(frozen=True)
class BytesFormat(Node):
    def to_sql(self) -> str:
        return "BYTES"


@dataclass(frozen=True)
class JsonFormat(Node):
    array: bool = False

    def to_sql(self) -> str:
        return "JSON ARRAY" if self.array else "JSON"


@dataclass(frozen=True)
class CsvFormat(Node):
    """`CSV WITH n COLUMNS` (column_count) or `CSV WITH HEADER (a, b)` (header)."""

    column_count: int | None = None
    header: tuple[Ident, ...] | None = None
    delimiter: StringLiteral | None = None

    def to_sql(self) -> str:
        if self.header is not None:
            shape = f"HEADER ({_csv(self.header)})"
        else:
            shape = f"{self.column_count} COLUMNS"
        return f"CSV WITH {shape}{_clause('DELIMITED BY ', self.delimiter)}"


@dataclass(frozen=True)
class InlineSchema(Node):
    schema: StringLiteral
    confluent_wire_format: bool | None = None

    def to_sql(self) -> str:
        text = f"SCHEMA {self.schema.to_sql()}"
        if self.confluent_wire_format is not None:
            flag = "true" if self.confluent_wire_format else "false"
            text += f" (CONFLUENT WIRE FORMAT = {flag})"
        return text


@dataclass(frozen=True)
class CsrSchema(Node):
    connection: ObjectName

    def to_sql(self) -> str:
        return f"CONFLUENT SCHEMA REGISTRY CONNECTION {self.connection.to_sql()}"


@dataclass(frozen=True)
class AvroFormat(Node):
    schema: InlineSchema | CsrSchema

    def to_sql(self) -> str:
        return f"AVRO USING {self.schema.to_sql()}"


Format = TextFormat | BytesFormat | JsonFormat | CsvFormat | AvroFormat


@dataclass(frozen=True)
class BareFormat(Node):
    format: Format

    def to_sql(self) -> str:
        return f"FORMAT {self.format.to_sql()}"


@dataclass(frozen=True)
class KeyValueFormat(Node):
    key: Format
    value: Format

    def to_sql(self) -> str:
        return f"KEY FORMAT {self.key.to_sql()} VALUE FORMAT {self.value.to_sql()}"


FormatSpec = BareFormat | KeyValueFormat


# ---------------------------------------------------------------- sources


@dataclass(frozen=True)
class IncludeMetadata(Node):
    kind: str  # KEY | PARTITION | OFFSET | TIMESTAMP | HEADERS
    alias: Ident | None = None

    def to_sql(self) -> str:
        return self.kind + _clause("AS ", self.alias)


@dataclass(frozen=True)
class InlineErrors(Node):
    alias: Ident | None = None

    def to_sql(self) -> str:
        return "INLINE" + _clause("AS ", self.alias)


@dataclass(frozen=True)
class PropagateErrors(Node):
    def to_sql(self) -> str:
        return "PROPAGATE"


@dataclass(frozen=True)
class EnvelopeNone(Node):
    def to_sql(self) -> str:
        return "NONE"


@dataclass(frozen=True)
class EnvelopeDebezium(Node):
    def to_sql(self) -> str:
        return "DEBEZIUM"


@dataclass(frozen=True)
class EnvelopeUpsert(Node):
    """`UPSERT`; `value_decoding_errors` is empty when the clause is absent."""

    value_decoding_errors: tuple[InlineErrors | PropagateErrors, ...] = ()

    def to_sql(self) -> str:
        if not self.value_decoding_errors:
            return "UPSERT"
        return f"UPSERT (VALUE DECODING ERRORS = ({_csv(self.value_decoding_errors)}))"


Envelope = EnvelopeNone | EnvelopeDebezium | EnvelopeUpsert


@dataclass(frozen=True)
class TableReference(Node):
    """A table of `FOR TABLES (…)`: its upstream name and the subsource's name."""

    name: ObjectName
    alias: Ident | None = None

    def to_sql(self) -> str:
        return self.name.to_sql() + _clause("AS ", self.alias)


@dataclass(frozen=True)
class ExternalReferences(Node):
    """`FOR ALL TABLES` (no tables) or `FOR TABLES (…)`: Materialize's subsources of a
    multi-output source, which a Kafka source refuses."""

    tables: tuple[TableReference, ...] = ()

    def to_sql(self) -> str:
        return f"FOR TABLES ({_csv(self.tables)})" if self.tables else "FOR ALL TABLES"


@dataclass(frozen=True)
class CreateSource(Statement):
    name: ObjectName
    connection: ObjectName
    kafka_options: tuple[KafkaOption, ...]
    if_not_exists: bool = False
    columns: tuple[Ident, ...] = ()
    format: FormatSpec | None = None
    include: tuple[IncludeMetadata, ...] = ()
    envelope: Envelope | None = None
    external_references: ExternalReferences | None = None
    with_options: tuple[WithOption, ...] = ()

    def to_sql(self) -> str:
        parts = ["CREATE SOURCE"]
        if self.if_not_exists:
            parts.append("IF NOT EXISTS")
        parts.append(self.name.to_sql())
        if self.columns:
            parts.append(f"({_csv(self.columns)})")
        parts.append(
            f"FROM KAFKA CONNECTION {self.connection.to_sql()} ({_csv(self.kafka_options)})"
        )
        if self.format is not None:
            parts.append(self.format.to_sql())
        if self.include:
            parts.append(f"INCLUDE {_csv(self.include)}")
        if self.envelope is not None:
            parts.append(f"ENVELOPE {self.envelope.to_sql()}")
        if self.external_references is not None:
            parts.append(self.external_references.to_sql())
        if self.with_options:
            parts.append(f"WITH ({_csv(self.with_options)})")
        return " ".join(parts)


# ---------------------------------------------------------------- sinks


@dataclass(frozen=True)
class CreateSink(Statement):
    name: ObjectName
    from_: ObjectName
    connection: ObjectName
    kafka_options: tuple[KafkaOption, ...]
    # Both None for a sink from a dead-letter table, which writes Kafka Connect's format.
    format: FormatSpec | None
    envelope: EnvelopeUpsert | EnvelopeDebezium | None
    if_not_exists: bool = False
    key: tuple[Ident, ...] = ()
    # KEY (…) NOT ENFORCED: the key is taken as unique without the planner knowing it is.
    key_not_enforced: bool = False

    def to_sql(self) -> str:
        ine = " IF NOT EXISTS" if self.if_not_exists else ""
        enforced = " NOT ENFORCED" if self.key_not_enforced else ""
        key = f" KEY ({_csv(self.key)}){enforced}" if self.key else ""
        format_ = f" {self.format.to_sql()}" if self.format is not None else ""
        envelope = f" ENVELOPE {self.envelope.to_sql()}" if self.envelope is not None else ""
        return (
            f"CREATE SINK{ine} {self.name.to_sql()} FROM {self.from_.to_sql()} "
            f"INTO KAFKA CONNECTION {self.connection.to_sql()} ({_csv(self.kafka_options)})"
            f"{key}{format_}{envelope}"
        )


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class DataType(Node):
    """A column type: `name` is its words as canonical SQL (lower-cased, quoted only where
    they must be), then modifiers such as (10, 2) and array dimensions."""

    name: str
    modifiers: tuple[int, ...] = ()
    array_dims: int = 0

    def to_sql(self) -> str:
        mods = f"({', '.join(map(str, self.modifiers))})" if self.modifiers else ""
        return self.name + mods + "[]" * self.array_dims


@dataclass(frozen=True)
class ColumnConstraint(Node):
    kind: str  # NOT NULL | NULL | PRIMARY KEY | UNIQUE | DEFAULT
    default: Literal | None = None

    def to_sql(self) -> str:
        return self.kind + _clause("", self.default)


@dataclass(frozen=True)
class ColumnDef(Node):
    name: Ident
    data_type: DataType
    constraints: tuple[ColumnConstraint, ...] = ()

    def to_sql(self) -> str:
        text = f"{self.name.to_sql()} {self.data_type.to_sql()}"
        return " ".join([text, *(c.to_sql() for c in self.constraints)])


@dataclass(frozen=True)
class TableConstraint(Node):
    kind: str  # PRIMARY KEY | UNIQUE
    columns: tuple[Ident, ...]

    def to_sql(self) -> str:
        return f"{self.kind} ({_csv(self.columns)})"


@dataclass(frozen=True)
class CreateTable(Statement):
    name: ObjectName
    columns: tuple[ColumnDef, ...]
    constraints: tuple[TableConstraint, ...] = ()
    if_not_exists: bool = False

    def to_sql(self) -> str:
        ine = " IF NOT EXISTS" if self.if_not_exists else ""
        return f"CREATE TABLE{ine} {self.name.to_sql()} ({_csv(self.columns + self.constraints)})"


@dataclass(frozen=True)
class IndexColumn(Node):
    """`column [ASC | DESC]` in CREATE INDEX."""

    column: Ident
    order: str | None = None  # ASC | DESC

    def to_sql(self) -> str:
        return self.column.to_sql() + (f" {self.order}" if self.order else "")


@dataclass(frozen=True)
class CreateIndex(Statement):
    """`CREATE [UNIQUE] INDEX name ON relation (column [ASC | DESC], …)`."""

    name: ObjectName
    on: ObjectName
    columns: tuple[IndexColumn, ...]
    unique: bool = False
    if_not_exists: bool = False

    def to_sql(self) -> str:
        unique = " UNIQUE" if self.unique else ""
        ine = " IF NOT EXISTS" if self.if_not_exists else ""
        return f"CREATE{unique} INDEX{ine} {self.name.to_sql()} ON {self.on.to_sql()} ({_csv(self.columns)})"


# ---------------------------------------------------------------- queries and views


@dataclass(frozen=True)
class QueryBody(Node):
    """SQL parsed by sqlglot: `sql` is its canonical text, `expression` the sqlglot tree."""

    sql: str
    expression: Any = field(default=None, compare=False, repr=False, hash=False)

    def to_sql(self) -> str:
        return self.sql


@dataclass(frozen=True)
class BodyStatement(Statement):
    """A statement that is all query body: the subclass says which kind."""

    body: QueryBody

    def to_sql(self) -> str:
        return self.body.to_sql()


@dataclass(frozen=True)
class Select(BodyStatement):
    pass


@dataclass(frozen=True)
class Insert(BodyStatement):
    pass


@dataclass(frozen=True)
class Update(BodyStatement):
    pass


@dataclass(frozen=True)
class Delete(BodyStatement):
    pass


@dataclass(frozen=True)
class CreateView(Statement):
    name: ObjectName
    query: QueryBody
    materialized: bool = False
    if_not_exists: bool = False
    columns: tuple[Ident, ...] = ()

    def to_sql(self) -> str:
        kind = "MATERIALIZED VIEW" if self.materialized else "VIEW"
        ine = " IF NOT EXISTS" if self.if_not_exists else ""
        cols = f" ({_csv(self.columns)})" if self.columns else ""
        return f"CREATE {kind}{ine} {self.name.to_sql()}{cols} AS {self.query.to_sql()}"


@dataclass(frozen=True)
class Subscribe(Statement):
    target: ObjectName | QueryBody

    def to_sql(self) -> str:
        if isinstance(self.target, QueryBody):
            return f"SUBSCRIBE ({self.target.to_sql()})"
        return f"SUBSCRIBE {self.target.to_sql()}"


# ---------------------------------------------------------------- catalog commands


@dataclass(frozen=True)
class ShowObjects(Statement):
    kind: str  # SOURCES | VIEWS | MATERIALIZED VIEWS | TABLES | SINKS | CONNECTIONS | SECRETS

    def to_sql(self) -> str:
        return f"SHOW {self.kind}"


@dataclass(frozen=True)
class ShowColumns(Statement):
    name: ObjectName

    def to_sql(self) -> str:
        return f"SHOW COLUMNS FROM {self.name.to_sql()}"


@dataclass(frozen=True)
class ShowSourceStatistics(Statement):
    name: ObjectName | None = None  # None: every source

    def to_sql(self) -> str:
        target = "" if self.name is None else f" FOR {self.name.to_sql()}"
        return f"SHOW SOURCE STATISTICS{target}"


@dataclass(frozen=True)
class ShowCreate(Statement):
    kind: str  # SOURCE | VIEW | MATERIALIZED VIEW | TABLE | SINK | CONNECTION | INDEX | SECRET
    name: ObjectName

    def to_sql(self) -> str:
        return f"SHOW CREATE {self.kind} {self.name.to_sql()}"


@dataclass(frozen=True)
class Drop(Statement):
    kind: str  # SOURCE | VIEW | MATERIALIZED VIEW | TABLE | SINK | CONNECTION | INDEX | SECRET
    names: tuple[ObjectName, ...]
    if_exists: bool = False
    cascade: bool = False

    def to_sql(self) -> str:
        ie = " IF EXISTS" if self.if_exists else ""
        cascade = " CASCADE" if self.cascade else ""
        return f"DROP {self.kind}{ie} {_csv(self.names)}{cascade}"


@dataclass(frozen=True)
class ExplainView(Node):
    """`[MATERIALIZED] VIEW name`: an existing view, as EXPLAIN names one."""

    name: ObjectName
    materialized: bool = False

    def to_sql(self) -> str:
        return f"{'MATERIALIZED ' if self.materialized else ''}VIEW {self.name.to_sql()}"


@dataclass(frozen=True)
class Explain(Statement):
    statement: Select | CreateView | Subscribe | CreateSink | CreateSource | ExplainView
    # PLAN | OPTIMIZED PLAN | PHYSICAL PLAN | RAW PLAN | DECORRELATED PLAN |
    # LOCALLY OPTIMIZED PLAN | PYSPARK | TIMELINE
    stage: str | None = None
    modifiers: tuple[str, ...] = ()  # WITH (humanized expressions, reads): lower-case words
    format: str | None = None  # AS TEXT | VERBOSE TEXT | JSON | DOT

    def to_sql(self) -> str:
        parts = ["EXPLAIN"]
        if self.stage is not None:
            parts.append(self.stage)
        if self.modifiers:
            parts.append(f"WITH ({', '.join(self.modifiers)})")
        if self.format is not None:
            parts.append(f"AS {self.format}")
        if len(parts) > 1:
            parts.append("FOR")
        return f"{' '.join(parts)} {self.statement.to_sql()}"


# ---------------------------------------------------------------- dumping


def dump(node: Any, indent: str = "") -> str:
    """An indented, span-free rendering of a tree, for golden files and `sluice parse --ast`."""
    if isinstance(node, tuple):
        if not node:
            return "()"
        inner = indent + "  "
        items = "".join(f"\n{inner}{dump(n, inner)}," for n in node)
        return f"({items}\n{indent})"
    if not isinstance(node, Node):
        return repr(node)
    if isinstance(node, Ident):
        return f"Ident({node.value!r})"
    if isinstance(node, ObjectName):
        return f"ObjectName({str(node)!r})" if len(node.parts) == 1 else (
            f"ObjectName({[p.value for p in node.parts]!r})"
        )
    shown = [
        (f.name, getattr(node, f.name))
        for f in fields(node)
        if f.repr and getattr(node, f.name) != f.default
    ]
    if not shown:
        return f"{type(node).__name__}()"
    if all(not isinstance(v, (Node, tuple)) for _, v in shown):
        return f"{type(node).__name__}({', '.join(f'{k}={v!r}' for k, v in shown)})"
    inner = indent + "  "
    items = "".join(f"\n{inner}{k}={dump(v, inner)}," for k, v in shown)
    return f"{type(node).__name__}({items}\n{indent})"
