"""The format registry: each message format — TEXT, BYTES, JSON, CSV, AVRO with an inline
schema, AVRO via a Confluent schema registry — is one class here owning all of it:

* its catalog description: the class is the frozen dataclass a source or sink stores
  (`FormatDesc` is their tagged union; the catalog's codec tags it with the class name);
* its columns: `for_source` plans them from the format's AST node (what one side of a
  message decodes to, DESIGN §3, with Materialize's error texts), `for_sink` from the
  columns a sink writes;
* its decoder: `native` names the decoding Spark does itself (TEXT, BYTES); otherwise
  `decoder` builds the `kafka/decode.py` decoder the Kafka reader runs. `unpack` says how
  the renderer turns a side's decoded value into the format's columns;
* its encoder: `encode` turns a row's values into payload bytes with `kafka/encode.py`.

It sits in the catalog, the lowest layer, because every stage works with formats and none
may import a stage above it: the planner makes them, the renderer and the Kafka reader on
Spark's executors decode with them, sinks encode with them. For the same reason it imports
neither pyspark nor `sluice.syntax` (which would load the parser into every reader): it
knows a format's AST node by its class name and reads it as plain data; the planner
resolves what a node names in the catalog (a schema registry connection, the schema it
holds) and hands that in.
"""

from __future__ import annotations

import functools
import json
import math
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import fastavro

from sluice.catalog.avro import AVRO_TYPE_OF, avro_columns, debezium_columns, parse_avro_schema, schema_of
from sluice.catalog.types import BYTEA, JSONB, TEXT, Column, SqlType, unique_columns
from sluice.errors import FeatureNotSupported, InternalError, InvalidParameterValue, Span
from sluice.kafka.encode import avro_datum, confluent_frame
from sluice.values import pg_text

if TYPE_CHECKING:
    from sluice.kafka.avro_decode import AvroDecoder
    from sluice.kafka.csv_decode import CsvDecoder
    from sluice.kafka.json_decode import JsonDecoder
    from sluice.kafka.retry import RetryPolicy

# How the renderer gets a side's decoded value: Spark decodes the raw bytes as UTF-8 text
# ("utf8", invalid UTF-8 being the message's error) or keeps them ("bytes"); None means
# the reader decoded it (`<side>_data`, `<side>_error`).
Native = Literal["utf8", "bytes"] | None
# How the renderer makes the format's columns of that value: the value itself ("value"),
# a jsonb parsed from JSON text ("variant"), the items of a list ("items"), the fields of
# a record, a union's branches each a column of its own ("fields").
Unpack = Literal["value", "variant", "items", "fields"]


@dataclass(frozen=True)
class RegistrySchema:
    """A schema as a schema registry holds it."""

    id: int
    schema: str  # Avro schema, JSON text


@dataclass(frozen=True)
class Format:
    columns: tuple[Column, ...]

    name: ClassVar[str]  # as SHOW and EXPLAIN name it
    syntax: ClassVar[str]  # the class name of its AST node
    native: ClassVar[Native] = None
    debezium: ClassVar[bool] = False  # whether a value in it may be a Debezium envelope

    @property
    def named(self) -> bool:
        """Whether the data names the columns (CSV header, Avro record fields)."""
        return False

    @property
    def registry(self) -> str | None:
        """The item id of the schema registry connection it reads schemas from."""
        return None

    @property
    def unpack(self) -> Unpack:
        return "value"

    @classmethod
    def accepts(cls, node: Any) -> bool:
        return type(node).__name__ == cls.syntax

    @classmethod
    def registry_of(cls, node: Any) -> Any:
        """The schema registry connection (ObjectName node) a node of this format names."""
        return None

    @classmethod
    def for_source(cls, node: Any, registry: str | None, fetched: RegistrySchema | None) -> Self:
        """What one side of a source's messages decodes to. When `registry_of(node)` names a
        connection, `registry` is its item id and `fetched` its schema for the side's subject."""
        raise NotImplementedError(cls.__name__)

    @classmethod
    def for_sink(cls, columns: tuple[Column, ...], span: Span | None, registry: str | None) -> Self:
        """The encoding of a sink's `columns` (its key's or its rows'); `registry` is the
        item id of the connection `registry_of` names."""
        raise FeatureNotSupported(f"FORMAT {cls.name.upper()} is not supported for sinks", span=span)

    def debezium_columns(self, span: Span | None) -> tuple[Column, ...]:
        """The columns of a Debezium envelope's rows, for a format with `debezium` set."""
        raise InternalError.bug(f"FORMAT {self.name.upper()} holds no Debezium envelope")

    def decoder(self, registry_url: str | None, login: tuple | None, retry: RetryPolicy):
        """The reader's decoder (for a format Spark does not decode natively). Decoders load
        pyarrow, which planning has no use for: each is imported where it is made."""
        raise TypeError(f"{self.name} is decoded natively in Spark")

    def encode(self, values: Sequence) -> bytes | None:
        """A row of `columns` as payload bytes (None: no payload)."""
        raise TypeError(f"{self.name} does not encode")


@dataclass(frozen=True)
class _Whole(Format):
    """A format whose one column is the whole payload, decoded by Spark natively."""

    source_column: ClassVar[Column]
    sink_type: ClassVar[SqlType | None]  # the type a sink's one column must have (None: any)

    @classmethod
    def for_source(cls, node: Any, registry: str | None, fetched: RegistrySchema | None) -> Self:
        return cls((cls.source_column,))

    @classmethod
    def for_sink(cls, columns: tuple[Column, ...], span: Span | None, registry: str | None) -> Self:
        if len(columns) != 1:
            raise FeatureNotSupported(
                f"FORMAT {cls.name.upper()} requires a single column, found {len(columns)}", span=span
            )
        (column,) = columns
        if cls.sink_type not in (None, column.type):
            raise InvalidParameterValue(
                f"FORMAT {cls.name.upper()} requires a column of type {cls.sink_type.name}, "
                f'found "{column.name}" {column.type.display()}',
                span=span,
            )
        return cls(columns)

    def encode(self, values: Sequence) -> bytes | None:
        """The value itself: its PostgreSQL text in UTF-8 (TEXT), its bytes (BYTES)."""
        (value,) = values
        if value is None:
            return None
        return pg_text(value).encode("utf-8") if self.native == "utf8" else bytes(value)


@dataclass(frozen=True)
class Text(_Whole):
    """A sink writes the text of any one column."""

    name = "text"
    syntax = "TextFormat"
    native = "utf8"
    source_column = Column("text", TEXT, False)
    sink_type = None


@dataclass(frozen=True)
class Bytes(_Whole):
    name = "bytes"
    syntax = "BytesFormat"
    native = "bytes"
    source_column = Column("data", BYTEA, False)
    sink_type = BYTEA


def _shaped(sql_type: SqlType, value: Any, scalar: Callable[[SqlType, Any], Any]) -> Any:
    """`value` of `sql_type` as plain data: records as dicts, lists and maps as such, each
    scalar as `scalar` makes it."""
    if value is None:
        return None
    if sql_type.name == "record":
        fields = value.values() if isinstance(value, dict) else value
        return {f.name: _shaped(f.type, v, scalar) for f, v in zip(sql_type.fields, fields, strict=True)}
    element = sql_type.element
    if sql_type.name == "list" and element is not None:
        return [_shaped(element, v, scalar) for v in value]
    if sql_type.name == "map" and element is not None:
        return {k: _shaped(element, v, scalar) for k, v in value.items()}
    return scalar(sql_type, value)


def _shaped_row(columns: tuple[Column, ...], values: Sequence, scalar: Callable[[SqlType, Any], Any]) -> dict:
    return {c.name: _shaped(c.type, v, scalar) for c, v in zip(columns, values, strict=True)}


_JSON_NUMBERS = {"smallint", "integer", "bigint", "real", "double precision"}


def _json_scalar(sql_type: SqlType, value: Any) -> Any:
    """A scalar in JSON: jsonb as itself, booleans and finite integers and floats as JSON's
    own, anything else (numeric, whose digits a double would lose, too) as its PostgreSQL text."""
    if sql_type == JSONB:
        return json.loads(value)
    if isinstance(value, bool) or (sql_type.name in _JSON_NUMBERS and math.isfinite(value)):
        return value
    return pg_text(value)


@dataclass(frozen=True)
class Json(Format):
    name = "json"
    syntax = "JsonFormat"

    @property
    def unpack(self) -> Unpack:
        return "variant"

    @classmethod
    def for_source(cls, node: Any, registry: str | None, fetched: RegistrySchema | None) -> Self:
        if node.array:
            raise FeatureNotSupported("JSON ARRAY format in sources not yet supported", span=node.span)
        return cls((Column("data", JSONB, False),))

    @classmethod
    def for_sink(cls, columns: tuple[Column, ...], span: Span | None, registry: str | None) -> Self:
        return cls(columns)

    def decoder(self, registry_url: str | None, login: tuple | None, retry: RetryPolicy) -> JsonDecoder:
        from sluice.kafka.json_decode import JsonDecoder

        return JsonDecoder()

    def encode(self, values: Sequence) -> bytes:
        """A JSON object of the row, keys in column order: `{"name":value,…}`, each name
        as JSON's string and each value as `value_text` writes it."""
        members = (
            _json_text(column.name) + ":" + self.value_text(index, value)
            for index, (column, value) in enumerate(zip(self.columns, values, strict=True))
        )
        return ("{" + ",".join(members) + "}").encode("utf-8")

    def value_text(self, index: int, value: Any) -> str:
        """The JSON text of column `index`'s `value` inside the object `encode` writes."""
        return _json_text(_shaped(self.columns[index].type, value, _json_scalar))


# What `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` uses, made once: a
# sink encodes every value of a column with it.
_JSON_TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _json_text(value: Any) -> str:
    # Numbers as the encoder writes them (int's and float's repr), without its overhead.
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return repr(value)
    return _JSON_TEXT.encode(value)


@dataclass(frozen=True)
class Csv(Format):
    delimiter: str = ","
    header: bool = False  # columns named by `CSV WITH HEADER (…)`, not `columnN`

    name = "csv"
    syntax = "CsvFormat"

    @property
    def named(self) -> bool:
        return self.header

    @property
    def unpack(self) -> Unpack:
        return "items"

    @classmethod
    def for_source(cls, node: Any, registry: str | None, fetched: RegistrySchema | None) -> Self:
        delimiter = "," if node.delimiter is None else node.delimiter.value
        if len(delimiter) != 1:
            raise InvalidParameterValue("CSV delimiter must be a single character", span=node.delimiter.span)
        if not delimiter.isascii():
            raise InvalidParameterValue("CSV delimiter must be an ASCII character", span=node.delimiter.span)
        if node.header is not None:
            names = [(i.value, i.span) for i in node.header]
        else:
            if node.column_count < 1:
                raise InvalidParameterValue("CSV must have at least one column", span=node.span)
            names = [(f"column{i}", node.span) for i in range(1, node.column_count + 1)]
        columns = unique_columns([(Column(n, TEXT, False), s) for n, s in names])
        return cls(columns, delimiter, node.header is not None)

    def decoder(self, registry_url: str | None, login: tuple | None, retry: RetryPolicy) -> CsvDecoder:
        from sluice.kafka.csv_decode import CsvDecoder

        return CsvDecoder(len(self.columns), self.delimiter)


@dataclass(frozen=True)
class _Avro(Format):
    top_record: bool  # columns named by the fields of a top-level record
    schema: str  # the reader schema, JSON text

    name = "avro"
    syntax = "AvroFormat"
    debezium = True
    schema_node: ClassVar[str]  # the class name of the node naming where the schema is

    @property
    def named(self) -> bool:
        return self.top_record

    @property
    def unpack(self) -> Unpack:
        return "fields" if self.top_record else "value"

    @classmethod
    def accepts(cls, node: Any) -> bool:
        return super().accepts(node) and type(node.schema).__name__ == cls.schema_node

    def debezium_columns(self, span: Span | None) -> tuple[Column, ...]:
        return debezium_columns(self.schema, span)


def _avro_scalar(sql_type: SqlType, value: Any) -> Any:
    if sql_type.name not in AVRO_TYPE_OF:
        return pg_text(value)
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


@dataclass(frozen=True)
class AvroInline(_Avro):
    confluent_wire_format: bool = True

    schema_node = "InlineSchema"

    @classmethod
    def for_source(cls, node: Any, registry: str | None, fetched: RegistrySchema | None) -> Self:
        text = node.schema.schema
        columns, named = avro_columns(text.value, text.span)
        wire = node.schema.confluent_wire_format
        return cls(columns, named, text.value, True if wire is None else wire)

    @classmethod
    def for_sink(cls, columns: tuple[Column, ...], span: Span | None, registry: str | None) -> Self:
        raise FeatureNotSupported(
            "FORMAT AVRO USING SCHEMA is not supported for sinks",
            span=span,
            hint="a sink writes Avro with the schema of its columns: AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION",
        )

    def decoder(self, registry_url: str | None, login: tuple | None, retry: RetryPolicy) -> AvroDecoder:
        from sluice.kafka.avro_decode import AvroDecoder

        return AvroDecoder(self.schema, self.confluent_wire_format, None, None, retry)


@dataclass(frozen=True)
class AvroRegistry(_Avro):
    registry_connection: str  # item id
    # The schema's id in the registry; a sink's is given when it registers its schema.
    schema_id: int | None = None

    schema_node = "CsrSchema"

    @property
    def registry(self) -> str | None:
        return self.registry_connection

    @classmethod
    def registry_of(cls, node: Any) -> Any:
        return node.schema.connection

    @classmethod
    def for_source(cls, node: Any, registry: str | None, fetched: RegistrySchema | None) -> Self:
        if registry is None or fetched is None:
            raise InternalError.bug("a schema registry format planned without its registry's schema")
        columns, named = avro_columns(fetched.schema, node.span)
        return cls(columns, named, fetched.schema, registry, fetched.id)

    @classmethod
    def for_sink(cls, columns: tuple[Column, ...], span: Span | None, registry: str | None) -> Self:
        if registry is None:
            raise InternalError.bug("a schema registry format planned without its registry")
        schema = json.dumps(schema_of(columns))
        parse_avro_schema(schema, span)  # column names must be Avro names
        return cls(columns, True, schema, registry)

    def decoder(self, registry_url: str | None, login: tuple | None, retry: RetryPolicy) -> AvroDecoder:
        from sluice.kafka.avro_decode import AvroDecoder

        return AvroDecoder(self.schema, True, registry_url, login, retry)

    def encode(self, values: Sequence) -> bytes:
        """The row in the Confluent wire format under the schema's registry id."""
        if self.schema_id is None:
            raise ValueError("the schema has no registry id yet")
        return confluent_frame(self.schema_id, self.body(values))

    def body(self, values: Sequence) -> bytes:
        """The row in Avro binary, unframed (a Debezium envelope holds it as before/after)."""
        datum = _shaped_row(self.columns, values, _avro_scalar)
        return avro_datum(self._parsed_schema, datum)

    @functools.cached_property
    def _parsed_schema(self):
        return fastavro.parse_schema(json.loads(self.schema))


FormatDesc = Text | Bytes | Json | Csv | AvroInline | AvroRegistry
FORMATS: tuple[type[FormatDesc], ...] = typing.get_args(FormatDesc)


def format_of(node: Any) -> type[FormatDesc]:
    """The format class of a format's AST node."""
    return next(cls for cls in FORMATS if cls.accepts(node))


def from_version_1(data: dict) -> dict:
    """A format as catalogs of version 1 stored it (one flat FormatDesc, its format named by
    `kind`), as this module stores the same format."""
    kind, columns, named = data["kind"], data["columns"], data.get("named", False)
    if kind in ("text", "bytes", "json"):
        return {"@": kind.capitalize(), "columns": columns}
    if kind == "csv":
        return {"@": "Csv", "columns": columns, "delimiter": data["csv_delimiter"], "header": named}
    if kind == "avro" and data.get("registry_connection") is not None:
        return {
            "@": "AvroRegistry",
            "columns": columns,
            "top_record": named,
            "schema": data["avro_schema"],
            "registry_connection": data["registry_connection"],
            "schema_id": data["avro_schema_id"],
        }
    if kind == "avro":
        return {
            "@": "AvroInline",
            "columns": columns,
            "top_record": named,
            "schema": data["avro_schema"],
            "confluent_wire_format": data.get("confluent_wire_format", True),
        }
    raise ValueError(f"unknown format kind {kind!r}")


# The formats version-1 catalogs stored as SQL text for sinks, by that text's start.
_VERSION_1_SINK_FORMATS: dict[str, type[FormatDesc]] = {
    "TEXT": Text,
    "BYTES": Bytes,
    "JSON": Json,
    "AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION ": AvroRegistry,
}


def sink_format_from_version_1(sql: str, columns: tuple[Column, ...], registry: str | None) -> FormatDesc:
    """A sink's format, stored as SQL text by version-1 catalogs, for the sink's `columns`."""
    for start, cls in _VERSION_1_SINK_FORMATS.items():
        if sql == start or (start.endswith(" ") and sql.startswith(start)):
            return cls.for_sink(columns, None, registry)
    raise FeatureNotSupported(f"FORMAT {sql} is not supported for sinks")
