"""The sink envelopes of rows — `Upsert` (key = KEY columns, value = the row, a deleted key
a tombstone) and `Debezium` (value `{"before": …, "after": …}`, with or without a KEY) —
how a value format's row encoding is framed for each, and `envelope_of`, the one place
that chooses a sink's envelope (a dead-letter table's rows become Kafka Connect DLQ
messages: `dead_letter`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Protocol, cast

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame

from sluice.catalog import items as kinds
from sluice.catalog.formats import AvroRegistry, Format
from sluice.catalog.items import Item, SinkDesc
from sluice.catalog.secrets import registry_login
from sluice.catalog.store import Catalog
from sluice.errors import FeatureNotSupported, InternalError
from sluice.kafka.encode import confluent_frame
from sluice.kafka.registry import SchemaRegistry
from sluice.spark.pyspark_code import SchemaIds, recorded
from sluice.storage.sink.changes import Change, Changes, Message
from sluice.storage.sink.dead_letter import dead_letters
from sluice.storage.sink.encode import encoded
from sluice.storage.sink.envelope import SinkEnvelope


def envelope_of(sink: Item, catalog: Catalog) -> SinkEnvelope:
    """The envelope of the sink `sink`: by what its relation is, then by its ENVELOPE."""
    relation = catalog.by_id(sink.sink_desc.source)
    if relation.kind == kinds.DEAD_LETTER_TABLE:
        return dead_letters(sink, catalog)
    return _row_envelope(sink, catalog)


class Registry(Protocol):
    """What a sink registers its schemas with: a `SchemaRegistry`, or, recorded, the
    program's `schema_ids` (see `_registry`)."""

    def register(self, subject: str, schema: str) -> int: ...


class _Rows:
    """A value format's row encoding and how an envelope frames it."""

    def __init__(self, fmt: Format, registry: Registry | None, topic: str) -> None:
        self.format = fmt
        self.registry = registry
        self.topic = topic
        self.debezium_id: int | None = None

    def register(self, debezium: bool) -> None:
        if debezium and self.format.name not in ("json", "avro"):  # planned by an older sluice
            raise FeatureNotSupported(f"ENVELOPE DEBEZIUM requires FORMAT JSON or AVRO, found FORMAT {self.format.name.upper()}")
        if not isinstance(self.format, AvroRegistry):
            return
        subject = f"{self.topic}-value"
        if debezium:
            row = json.loads(self.format.schema)
            envelope = {
                "type": "record",
                "name": "envelope",
                "fields": [{"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "row"]}],
            }
            self.debezium_id = _registered(self.registry).register(subject, json.dumps(envelope))
        else:
            self.format = replace(self.format, schema_id=_registered(self.registry).register(subject, self.format.schema))

    def column(self, frame: DataFrame, columns: tuple[str, ...]) -> SparkColumn:
        """The payload of a row: the whole value for UPSERT, the row for DEBEZIUM."""
        return encoded(self.format, frame, columns, body=self.debezium_id is not None)

    def debezium(self, before: bytes | None, after: bytes | None) -> bytes:
        if isinstance(self.format, AvroRegistry):
            if self.debezium_id is None:  # `register` gives a registry's Avro its envelope's id
                raise InternalError.bug("a Debezium row framed before its envelope's schema was registered")
            union = b"".join(b"\x00" if row is None else b"\x02" + row for row in (before, after))
            return confluent_frame(self.debezium_id, union)
        return b'{"before":' + (before or b"null") + b',"after":' + (after or b"null") + b"}"



def _key_format(desc: SinkDesc, registry: Registry | None) -> Format | None:
    fmt = desc.key_format
    if isinstance(fmt, AvroRegistry):
        return replace(fmt, schema_id=_registered(registry).register(f"{desc.topic}-key", fmt.schema))
    return fmt


def _prepared_key(fmt: Format | None) -> Format:
    """The key format `prepare` made, of a sink with a KEY (which its planner gave one)."""
    if fmt is None:
        raise InternalError.bug("a sink's KEY encoded without its key format")
    return fmt


def _registered(registry: Registry | None) -> Registry:
    """The registry of a sink with a format that registers its schemas (`_registry` gives it one)."""
    if registry is None:
        raise InternalError.bug("a sink's schema registered with no schema registry")
    return registry


class Upsert(SinkEnvelope):
    """Key: the KEY columns; value: the row; a key that went: a tombstone."""

    def __init__(self, desc: SinkDesc, rows: _Rows, registry: Registry | None, columns: tuple[str, ...]):
        self.desc, self.rows, self.registry, self.columns = desc, rows, registry, columns
        self.key_format: Format | None = None

    def prepare(self) -> None:
        self.key_format = _key_format(self.desc, self.registry)
        self.rows.register(debezium=False)

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        return encoded(_prepared_key(self.key_format), frame, self.desc.key), self.rows.column(frame, self.columns)

    def messages(self, change: Change) -> Iterator[Message]:
        yield Message(change.identity, change.after)

    def batch(self, changes: Changes) -> Iterable[Message]:
        return map(Message, changes.identity, changes.after)


class Debezium(SinkEnvelope):
    """Value `{"before": row, "after": row}`; keyed by the KEY columns if there are any,
    else every row is its own identity (key null) and a row held twice is written twice."""

    def __init__(self, desc: SinkDesc, rows: _Rows, registry: Registry | None, columns: tuple[str, ...]):
        self.desc, self.rows, self.registry, self.columns = desc, rows, registry, columns
        self.key_format: Format | None = None
        self.unique = bool(desc.key)

    def prepare(self) -> None:
        self.key_format = _key_format(self.desc, self.registry)
        self.rows.register(debezium=True)

    def shape(self, frame: DataFrame) -> tuple[SparkColumn, SparkColumn]:
        row = self.rows.column(frame, self.columns)
        if not self.desc.key:
            return row, row
        return encoded(_prepared_key(self.key_format), frame, self.desc.key), row

    def messages(self, change: Change) -> Iterator[Message]:
        key = change.identity if self.desc.key else None
        for _ in range(change.count):
            yield Message(key, self.rows.debezium(change.before, change.after))


def _registry(desc: SinkDesc, catalog: Catalog) -> Registry | None:
    for fmt in (desc.key_format, desc.value_format):
        if fmt is not None and fmt.registry is not None:
            if recorded():
                return _recorded_ids()
            connection = catalog.by_id(fmt.registry).connection_desc
            return SchemaRegistry(connection.registry_url, *(registry_login(connection, catalog) or ()))
    return None


def _recorded_ids() -> Registry:
    """EXPLAIN PYSPARK registers nothing: a schema's id is its program's variable
    `schema_ids[subject]`, an expression the envelopes pass on wherever the id goes (into
    a format, beside a row), as they do the int a registry gives. So the recording's
    `SchemaIds` stands in for a registry, typed as one."""
    return cast(Registry, SchemaIds())


def _row_envelope(sink: Item, catalog: Catalog) -> SinkEnvelope:
    desc = sink.sink_desc
    relation = catalog.by_id(desc.source)
    registry = _registry(desc, catalog)
    if desc.value_format is None:  # only a dead-letter sink has none, and `envelope_of` sent it away
        raise InternalError.bug(f'sink "{sink.name}" of rows without a value format')
    rows = _Rows(desc.value_format, registry, desc.topic)
    columns = tuple(c.name for c in relation.columns)
    cls = Upsert if desc.envelope == "upsert" else Debezium
    return cls(desc, rows, registry, columns)
