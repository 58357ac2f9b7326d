"""CREATE SOURCE → a source item (and its dead-letter table): options, columns, timeline.

Columns follow DESIGN §3: key columns first, then the INLINE error column, then the value
columns, then metadata columns in INCLUDE order; a user column list renames positionally.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from sluice.catalog import items as kinds
from sluice.catalog.formats import FormatDesc, format_of
from sluice.catalog.items import (
    DEFAULT_RETRY_DELAY_MAX_MS,
    DEFAULT_RETRY_TIMEOUT_MS,
    DeadLetterDesc,
    Item,
    SourceDesc,
)
from sluice.catalog.store import Catalog
from sluice.catalog.timeline import EPOCH_MS, EXTERNAL, USER, Timeline
from sluice.catalog.types import (
    BIGINT,
    BYTEA,
    INTEGER,
    MZ_TIMESTAMP,
    TEXT,
    TIMESTAMP,
    Column,
    list_of,
    record,
    unique_columns,
)
from sluice.errors import FeatureNotSupported, InvalidParameterValue, Span
from sluice.plan.facts import Facts
from sluice.plan.formats import source_format
from sluice.plan.names import check_column_names, ensure_free, item_name, resolve
from sluice.syntax import ast

ERROR_COLUMN_TYPE = record(Column("description", TEXT, False))
METADATA_TYPES = {
    "PARTITION": INTEGER,
    "OFFSET": BIGINT,
    "TIMESTAMP": TIMESTAMP,
    "HEADERS": list_of(record(Column("key", TEXT, False), Column("value", BYTEA, True))),
}
DEAD_LETTER_COLUMNS = (
    Column("mz_timestamp", MZ_TIMESTAMP, False),
    Column("error", TEXT, False),
    Column("error_code", TEXT, False),
    Column("partition", INTEGER, False),
    Column("offset", BIGINT, False),
    Column("timestamp", TIMESTAMP, False),
    Column("key", BYTEA, True),
    Column("value", BYTEA, True),
)
# Materialize's bounds: the defaults of its system variables min_timestamp_interval and
# max_timestamp_interval (its adapter's vars), which sluice has no way to set.
TIMESTAMP_INTERVAL_RANGE_MS = (1000, 1000)
# A duration option's value when not given: a number, or None when there is no default.
Default = TypeVar("Default", int, None)
# An interval's text: parts such as '1 hour', '-30s', '1hr 1ms', '1.5 seconds'.
_INTERVAL_PART = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)
_INTERVAL_UNITS_MS: dict[str, Fraction | int] = {
    **dict.fromkeys(["us", "usec", "usecs", "microsecond", "microseconds"], Fraction(1, 1000)),
    **dict.fromkeys(["ms", "msec", "msecs", "millisecond", "milliseconds"], 1),
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], 1000),
    **dict.fromkeys(["m", "min", "mins", "minute", "minutes"], 60_000),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], 3_600_000),
    **dict.fromkeys(["d", "day", "days"], 86_400_000),
}
# librdkafka's topic.metadata.refresh.interval.ms is at most an hour (Materialize's bound).
MAX_TOPIC_METADATA_REFRESH_INTERVAL_MS = 3_600_000


@dataclass(frozen=True)
class _Options:
    """Options of one clause, each given at most once, with the node that gave it."""

    given: dict[str, ast.Option]

    @staticmethod
    def of(options: tuple[ast.Option, ...]) -> _Options:
        given: dict[str, ast.Option] = {}
        for option in options:
            if option.name in given:
                raise InvalidParameterValue(
                    f"{option.name} specified more than once", span=option.span
                )
            given[option.name] = option
        return _Options(given)

    def get(self, name: str) -> ast.Option | None:
        return self.given.get(name)


def plan_create_source(
    statement: ast.CreateSource, catalog: Catalog, facts: Facts
) -> tuple[Item, ...]:
    if (references := statement.external_references) is not None:
        raise FeatureNotSupported(
            f"{references.to_sql()} is only valid for multi-output sources", span=references.span
        )
    name = item_name(statement.name)
    ensure_free(catalog, name, statement.name.span)
    connection = resolve(catalog, statement.connection, kinds.CONNECTION)
    if connection.connection_desc.connection_type != kinds.KAFKA:
        raise InvalidParameterValue(
            f"{connection.name} is not a kafka connection", span=statement.connection.span
        )
    kafka = _Options.of(statement.kafka_options)
    if (sink_only := kafka.get("TOPIC PARTITION COUNT")) is not None:
        raise InvalidParameterValue("TOPIC PARTITION COUNT is only allowed on a sink", span=sink_only.span)
    topic_option = kafka.get("TOPIC")
    if topic_option is None:
        raise InvalidParameterValue("KAFKA CONNECTION without TOPIC", span=statement.span)
    topic = topic_option.string.value
    start_offsets = _start_offsets(kafka, topic, facts)
    start_timestamp = kafka.get("START TIMESTAMP")
    if start_offsets and start_timestamp is not None:
        raise InvalidParameterValue(
            "cannot specify START TIMESTAMP and START OFFSET at same time",
            span=start_timestamp.span,
        )
    group_id_prefix = kafka.get("GROUP ID PREFIX")
    metadata_refresh_ms = _topic_metadata_refresh_interval(kafka)

    key_ast, value_ast = _format_parts(statement)
    envelope = statement.envelope or ast.EnvelopeNone()
    include_key = next((i for i in statement.include if i.kind == "KEY"), None)
    _check_envelope(statement, envelope, key_ast, value_ast, include_key)

    key_format = None if key_ast is None else source_format(key_ast, "key", topic, catalog, facts)
    value_format = source_format(value_ast, "value", topic, catalog, facts)

    columns: list[tuple[Column, Span | None]] = []
    key_columns: tuple[str, ...] = ()
    packed = False
    if key_format is not None and (isinstance(envelope, ast.EnvelopeUpsert) or include_key):
        keys, packed = _key_columns(key_format, include_key, envelope)
        key_columns = tuple(c.name for c in keys)
        columns += [(c, include_key.span if include_key else None) for c in keys]

    inline, propagate = _value_decoding_errors(envelope)
    if inline is not None:
        error_name = "error" if inline.alias is None else inline.alias.value
        columns.append((Column(error_name, ERROR_COLUMN_TYPE, True), inline.span))

    if isinstance(envelope, ast.EnvelopeDebezium):
        values = value_format.debezium_columns(value_ast.span)
    else:
        values = value_format.columns
    if inline is not None:
        values = tuple(c.as_nullable() for c in values)
    columns += [(c, value_ast.span) for c in values]

    metadata = []
    for include in statement.include:
        if include.kind == "KEY":
            continue
        column_name = include.kind.lower() if include.alias is None else include.alias.value
        metadata.append((include.kind, column_name))
        columns.append((Column(column_name, METADATA_TYPES[include.kind], False), include.span))
    _check_included_once(statement.include)

    columns = _rename(statement, columns)
    final_columns = unique_columns(columns)

    with_options = _Options.of(statement.with_options)
    timeline = _timeline(with_options, name)
    source_id, dlq_id = catalog.allocate_ids(2)
    dlq_item = _dead_letter_table(with_options, catalog, name, source_id, dlq_id, timeline)

    desc = SourceDesc(
        connection=connection.id,
        topic=topic,
        value_format=value_format,
        envelope=_envelope_name(envelope),
        key_format=key_format,
        start_offsets=start_offsets,
        retained_from=facts.topic_lows,
        start_timestamp=None if start_timestamp is None else int(start_timestamp.number.text),
        group_id_prefix=None if group_id_prefix is None else group_id_prefix.string.value,
        topic_metadata_refresh_interval_ms=metadata_refresh_ms,
        key_columns=tuple(final_columns[i].name for i in range(len(key_columns))),
        key_packed=packed,
        inline_error_column=None if inline is None else final_columns[len(key_columns)].name,
        propagate_value_errors=propagate,
        metadata=tuple(
            (kind, final_columns[len(final_columns) - len(metadata) + i].name)
            for i, (kind, _) in enumerate(metadata)
        ),
        dead_letter_table=None if dlq_item is None else dlq_item.id,
        error_tolerance=_error_tolerance(with_options),
        timestamp_interval_ms=_timestamp_interval(with_options),
        # RETRY TIMEOUT = '0s' fails the source at the first fault, as Connect's default does.
        retry_timeout_ms=_duration_ms(with_options, "RETRY TIMEOUT", DEFAULT_RETRY_TIMEOUT_MS, zero_allowed=True),
        retry_delay_max_ms=_duration_ms(with_options, "RETRY DELAY MAX", DEFAULT_RETRY_DELAY_MAX_MS),
    )
    depends = [connection.id] + sorted(
        {f.registry for f in (key_format, value_format) if f and f.registry}
    )
    source = Item(
        id=source_id,
        name=name,
        kind=kinds.SOURCE,
        create_sql=statement.to_sql(),
        columns=final_columns,
        timeline=timeline,
        depends_on=tuple(depends),
        details=desc,
    )
    return (source,) if dlq_item is None else (source, dlq_item)


def _start_offsets(kafka: _Options, topic: str, facts: Facts) -> tuple[int, ...]:
    """One start offset per partition, from partition 0; the topic's partitions (when the
    session asked Kafka for them) must number at least as many."""
    option = kafka.get("START OFFSET")
    if option is None:
        return ()
    offsets = []
    for item in option.numbers:
        if int(item.text) < 0:
            raise InvalidParameterValue("START OFFSET must be a nonnegative integer", span=item.span)
        offsets.append(int(item.text))
    partitions = len(facts.topic_lows)
    if facts.topic_lows and len(offsets) > partitions:
        raise InvalidParameterValue(
            f"START OFFSET specified more partitions ({len(offsets)}) than topic ({topic}) "
            f"contains ({partitions})",
            span=option.numbers[partitions].span,
        )
    return tuple(offsets)


def _format_parts(statement: ast.CreateSource) -> tuple[ast.Format | None, ast.Format]:
    spec = statement.format
    if spec is None:
        raise InvalidParameterValue(
            "CREATE SOURCE requires a FORMAT", span=statement.span,
            hint="for raw messages use FORMAT BYTES",
        )
    if isinstance(spec, ast.KeyValueFormat):
        return spec.key, spec.value
    return None, spec.format


def _check_envelope(statement, envelope, key_ast, value_ast, include_key) -> None:
    if include_key is not None and key_ast is None:
        raise InvalidParameterValue(
            "INCLUDE KEY requires specifying KEY FORMAT .. VALUE FORMAT, got bare FORMAT",
            span=include_key.span,
        )
    if isinstance(envelope, (ast.EnvelopeUpsert, ast.EnvelopeDebezium)) and key_ast is None:
        raise InvalidParameterValue(
            "ENVELOPE [DEBEZIUM] UPSERT requires that KEY FORMAT be specified", span=envelope.span
        )
    if isinstance(envelope, ast.EnvelopeDebezium):
        if not format_of(value_ast).debezium:
            raise InvalidParameterValue(
                "ENVELOPE DEBEZIUM requires that VALUE FORMAT is set to AVRO", span=envelope.span
            )
        if include_key is not None:
            raise InvalidParameterValue(
                "Cannot use INCLUDE KEY with ENVELOPE DEBEZIUM: Debezium values include all keys.",
                span=include_key.span,
            )


def _key_columns(
    key_format: FormatDesc, include_key: ast.IncludeMetadata | None, envelope: ast.Node
) -> tuple[tuple[Column, ...], bool]:
    """The key's columns and whether they were packed into one record column."""
    keys = key_format.columns
    if not isinstance(envelope, ast.EnvelopeUpsert):
        keys = tuple(c.as_nullable() for c in keys)
    alias = None if include_key is None or include_key.alias is None else include_key.alias.value
    if len(keys) == 1:
        unnamed = "key" if not key_format.named else keys[0].name
        return (keys[0].renamed(alias or unnamed),), False
    if alias is not None:
        packed = Column(alias, record(*keys), not isinstance(envelope, ast.EnvelopeUpsert))
        return (packed,), True
    return keys, False


def _value_decoding_errors(envelope: ast.Node) -> tuple[ast.InlineErrors | None, bool]:
    """The INLINE action (if any) and whether value errors also propagate."""
    if not isinstance(envelope, ast.EnvelopeUpsert) or not envelope.value_decoding_errors:
        return None, True
    inline = [a for a in envelope.value_decoding_errors if isinstance(a, ast.InlineErrors)]
    propagate = [a for a in envelope.value_decoding_errors if isinstance(a, ast.PropagateErrors)]
    for actions, word in ((inline, "INLINE"), (propagate, "PROPAGATE")):
        if len(actions) > 1:
            raise InvalidParameterValue(
                f"VALUE DECODING ERRORS = {word} specified more than once", span=actions[1].span
            )
    return (inline[0] if inline else None), bool(propagate)


def _check_included_once(include: tuple[ast.IncludeMetadata, ...]) -> None:
    seen: set[str] = set()
    for item in include:
        if item.kind in seen:
            raise InvalidParameterValue(f"INCLUDE {item.kind} specified more than once", span=item.span)
        seen.add(item.kind)


def _rename(
    statement: ast.CreateSource, columns: list[tuple[Column, Span | None]]
) -> list[tuple[Column, Span | None]]:
    names = statement.columns
    check_column_names("source", statement.name, names, len(columns))
    renamed = [(c.renamed(n.value), n.span) for (c, _), n in zip(columns, names)]
    return renamed + columns[len(names) :]


def _envelope_name(envelope: ast.Node) -> str:
    if isinstance(envelope, ast.EnvelopeUpsert):
        return "upsert"
    if isinstance(envelope, ast.EnvelopeDebezium):
        return "debezium"
    return "none"


def _timeline(options: _Options, source_name: str) -> Timeline:
    named = options.get("TIMELINE")
    epoch = options.get("EPOCH MS TIMELINE")
    if named is not None and epoch is not None:
        raise InvalidParameterValue(
            "cannot specify both TIMELINE and EPOCH MS TIMELINE", span=epoch.span
        )
    if epoch is not None:
        return EPOCH_MS if epoch.boolean.value else Timeline(EXTERNAL, source_name)
    if named is None:
        return EPOCH_MS
    text = named.string.value
    if text == "mz_epoch_ms":
        return EPOCH_MS
    if text.startswith("mz_"):
        raise InvalidParameterValue(f'unacceptable timeline name "{text}"', span=named.value.span)
    return Timeline(USER, text)


def _dead_letter_table(
    options: _Options, catalog: Catalog, source: str, source_id: str, dlq_id: str, timeline
) -> Item | None:
    option = options.get("REDIRECT ERRORS")
    if option is None:
        return None
    name = item_name(option.object_name)
    if name == source:
        raise InvalidParameterValue(
            f"dead-letter table must not be named like its source \"{source}\"",
            span=option.value.span,
        )
    ensure_free(catalog, name, option.value.span)
    columns = ", ".join(
        f"{ast.quote_ident(c.name)} {c.type.display()}{'' if c.nullable else ' NOT NULL'}"
        for c in DEAD_LETTER_COLUMNS
    )
    return Item(
        id=dlq_id,
        name=name,
        kind=kinds.DEAD_LETTER_TABLE,
        create_sql=f"CREATE TABLE {ast.quote_ident(name)} ({columns})",
        columns=DEAD_LETTER_COLUMNS,
        timeline=timeline,
        depends_on=(source_id,),
        details=DeadLetterDesc(source_id),
    )


def _error_tolerance(options: _Options) -> int | None:
    option = options.get("ERROR TOLERANCE")
    if option is None or (
        isinstance(option.value, ast.KeywordValue) and option.value.word == "ALL"
    ):
        return None
    if isinstance(option.value, ast.KeywordValue):
        return 0
    return int(option.number.text)


def _timestamp_interval(options: _Options) -> int | None:
    option = options.get("TIMESTAMP INTERVAL")
    interval = _duration_ms(options, "TIMESTAMP INTERVAL", None)
    low, high = TIMESTAMP_INTERVAL_RANGE_MS
    if option is not None and interval is not None and not low <= interval <= high:
        raise InvalidParameterValue(
            f"invalid timestamp interval of {interval}ms, must be in the range [{low}ms, {high}ms]",
            span=option.value.span,
        )
    return interval


def _topic_metadata_refresh_interval(kafka: _Options) -> int | None:
    """TOPIC METADATA REFRESH INTERVAL in milliseconds, checked as Materialize checks it
    (an interval whose bare number counts seconds, as PostgreSQL reads one)."""
    option = kafka.get("TOPIC METADATA REFRESH INTERVAL")
    if option is None:
        return None
    interval = _interval_ms(option.string.value, bare_unit="s")
    if interval is None:
        raise InvalidParameterValue(
            f"invalid TOPIC METADATA REFRESH INTERVAL '{option.string.value}'",
            span=option.value.span,
            hint="write an interval such as '30s' or '5 minutes'",
        )
    if interval < 0:
        raise InvalidParameterValue("cannot convert negative interval to duration", span=option.value.span)
    if interval > MAX_TOPIC_METADATA_REFRESH_INTERVAL_MS:
        raise InvalidParameterValue(
            "TOPIC METADATA REFRESH INTERVAL cannot be greater than 1 hour", span=option.value.span
        )
    return int(interval)


def _interval_ms(text: str, bare_unit: str) -> Fraction | None:
    """The interval `text` in milliseconds, exactly however long the number (a part without
    a unit is in `bare_unit`); None if it is not an interval."""
    total, position = Fraction(0), 0
    while position < len(text):
        match = _INTERVAL_PART.match(text, position)
        if match is None:
            return None
        unit = _INTERVAL_UNITS_MS.get((match.group(2) or bare_unit).lower())
        if unit is None:
            return None
        total += Fraction(match.group(1)) * unit
        position = match.end()
    return total if position else None


def _duration_ms(options: _Options, name: str, default: Default, zero_allowed: bool = False) -> int | Default:
    """The duration option `name` in milliseconds (`default` when not given)."""
    option = options.get(name)
    if option is None:
        return default
    interval = _interval_ms(option.string.value, bare_unit="ms")
    duration = None if interval is None or interval < 0 else int(interval)
    if duration is None or (duration == 0 and not zero_allowed):
        least = "" if zero_allowed else "positive "
        raise InvalidParameterValue(
            f"invalid {name} '{option.string.value}'",
            span=option.value.span,
            hint=f"write a {least}duration such as '500ms', '1s' or '2 minutes'",
        )
    return duration

