"""CREATE TABLE / INDEX / VIEW / SINK and DROP."""

from __future__ import annotations

from sluice.catalog import items as kinds
from sluice.catalog.formats import FormatDesc
from sluice.catalog.items import Item, SinkDesc, TableDesc, ViewDesc
from sluice.catalog.store import Catalog
from sluice.catalog.timeline import EPOCH_MS
from sluice.catalog.types import Column, SqlType, unique_columns
from sluice.errors import (
    DependentObjectsStillExist,
    DuplicateColumn,
    FeatureNotSupported,
    InvalidParameterValue,
    UndefinedColumn,
    UndefinedObject,
    WrongObjectType,
)
from sluice.plan.formats import sink_format
from sluice.plan.keys import known_keys
from sluice.plan.names import check_column_names, ensure_free, item_name, resolve, unknown_item
from sluice.plan.plans import DropPlan, NoticePlan
from sluice.plan.queries import plan_query
from sluice.plan.timelines import single_timeline
from sluice.syntax import ast

# Type names as written → Materialize's names; anything else is not a type.
_TYPE_NAMES = {
    **dict.fromkeys(["int", "int4", "integer"], "integer"),
    **dict.fromkeys(["int8", "bigint"], "bigint"),
    **dict.fromkeys(["int2", "smallint"], "smallint"),
    **dict.fromkeys(["float", "float8", "double", "double precision"], "double precision"),
    **dict.fromkeys(["float4", "real"], "real"),
    **dict.fromkeys(["bool", "boolean"], "boolean"),
    **dict.fromkeys(["varchar", "character varying"], "character varying"),
    **dict.fromkeys(["char", "character", "bpchar"], "character"),
    **dict.fromkeys(["numeric", "decimal"], "numeric"),
    **dict.fromkeys(["json", "jsonb"], "jsonb"),
    **dict.fromkeys(["timestamptz", "timestamp with time zone"], "timestamp with time zone"),
    **dict.fromkeys(["timestamp", "timestamp without time zone"], "timestamp"),
    **{t: t for t in ("text", "bytea", "date", "time", "interval", "uuid", "mz_timestamp")},
}


def sql_type(data_type: ast.DataType) -> SqlType:
    name = _TYPE_NAMES.get(data_type.name)
    if name is None:
        raise UndefinedObject(f'type "{data_type.name}" does not exist', span=data_type.span)
    result = SqlType(name)
    for _ in range(data_type.array_dims):
        result = SqlType("array", element=result)
    return result


def plan_create_index(statement: ast.CreateIndex, catalog: Catalog) -> Item:
    """A catalog entry only (`IndexDesc` says why)."""
    name = item_name(statement.name)
    ensure_free(catalog, name, statement.name.span)
    item = resolve(catalog, statement.on, *kinds.RELATIONS)
    for ident in (c.column for c in statement.columns):
        if item.column(ident.value) is None:
            raise UndefinedColumn(f'column "{ident.value}" does not exist', span=ident.span)
    (item_id,) = catalog.allocate_ids(1)
    desc = kinds.IndexDesc(item.id, tuple(c.column.value for c in statement.columns))
    return Item(item_id, name, kinds.INDEX, statement.to_sql(), depends_on=(item.id,), details=desc)


def plan_create_table(statement: ast.CreateTable, catalog: Catalog) -> Item:
    name = item_name(statement.name)
    ensure_free(catalog, name, statement.name.span)
    primary_key = [c.name.value for c in statement.columns if _has(c, "PRIMARY KEY")]
    for constraint in statement.constraints:
        if constraint.kind == "PRIMARY KEY":
            primary_key += [i.value for i in constraint.columns]
    columns = unique_columns(
        (
            Column(
                c.name.value,
                sql_type(c.data_type),
                not (_has(c, "NOT NULL") or c.name.value in primary_key),
            ),
            c.name.span,
        )
        for c in statement.columns
    )
    names = {c.name for c in columns}
    for constraint in statement.constraints:
        for ident in constraint.columns:
            if ident.value not in names:
                raise UndefinedColumn(f'column "{ident.value}" does not exist', span=ident.span)
    defaults = tuple(
        (c.name.value, k.default.to_sql())
        for c in statement.columns
        for k in c.constraints
        if k.kind == "DEFAULT" and k.default is not None
    )
    (item_id,) = catalog.allocate_ids(1)
    return Item(
        item_id,
        name,
        kinds.TABLE,
        statement.to_sql(),
        columns=columns,
        timeline=EPOCH_MS,
        details=TableDesc(defaults, tuple(primary_key)),
    )


def _has(column: ast.ColumnDef, kind: str) -> bool:
    return any(k.kind == kind for k in column.constraints)


def plan_create_view(statement: ast.CreateView, catalog: Catalog) -> Item:
    name = item_name(statement.name)
    ensure_free(catalog, name, statement.name.span)
    query = plan_query(statement.query, catalog)
    columns = list(query.columns)
    check_column_names("view", statement.name, statement.columns, len(columns))
    spans = [i.span for i in statement.columns] + [statement.query.span] * len(columns)
    columns = [c.renamed(i.value) for c, i in zip(columns, statement.columns)] + columns[
        len(statement.columns) :
    ]
    (item_id,) = catalog.allocate_ids(1)
    return Item(
        item_id,
        name,
        kinds.MATERIALIZED_VIEW if statement.materialized else kinds.VIEW,
        statement.to_sql(),
        columns=unique_columns(zip(columns, spans)),
        timeline=query.timeline,
        depends_on=tuple(dict.fromkeys(r.item_id for r in query.reads)),
        details=ViewDesc(statement.query.sql),
    )


def plan_create_sink(statement: ast.CreateSink, catalog: Catalog) -> Item:
    """Materialize's checks in its order: the envelope, the KEY, then the connection,
    the topic and its options, the formats."""
    name = item_name(statement.name)
    ensure_free(catalog, name, statement.name.span)
    relation = resolve(catalog, statement.from_, *kinds.RELATIONS)
    connection = resolve(catalog, statement.connection, kinds.CONNECTION)
    clauses: tuple[ast.FormatSpec, ast.EnvelopeUpsert | ast.EnvelopeDebezium] | None = None
    if relation.kind == kinds.DEAD_LETTER_TABLE:
        _check_dead_letter_sink(statement, relation)
        envelope = "dead-letter"
    else:
        clauses = _sink_clauses(statement)
        envelope = "upsert" if isinstance(clauses[1], ast.EnvelopeUpsert) else "debezium"
        _check_sink_key(statement, relation, clauses[1], catalog)
    if connection.connection_desc.connection_type != kinds.KAFKA:
        raise InvalidParameterValue(
            f"{connection.name} is not a kafka connection", span=statement.connection.span
        )
    topic = next((o for o in statement.kafka_options if o.name == "TOPIC"), None)
    if topic is None:
        raise InvalidParameterValue("KAFKA CONNECTION must specify TOPIC", span=statement.span)
    partition_count = None
    for option in statement.kafka_options:
        if option.name == "TOPIC PARTITION COUNT":
            partition_count = int(option.number.text)
            if partition_count < 1 and partition_count != -1:  # -1: the broker's default
                raise InvalidParameterValue(PARTITION_COUNT, span=option.value.span)
        elif option.name != "TOPIC":
            raise InvalidParameterValue(f"{option.name} is not allowed on a sink", span=option.span)
    single_timeline(catalog, [relation.id], statement.span)
    value_format: FormatDesc | None = None
    key_format: FormatDesc | None = None
    if clauses is not None:
        spec, given = clauses
        key_ast, value_ast = (spec.key, spec.value) if isinstance(spec, ast.KeyValueFormat) else (spec.format, spec.format)
        value_format = sink_format(value_ast, relation.columns, catalog)
        if envelope == "debezium" and value_format.name not in ("json", "avro"):
            raise FeatureNotSupported(
                f"ENVELOPE DEBEZIUM requires FORMAT JSON or AVRO, found FORMAT {value_format.name.upper()}",
                span=given.span,
            )
        columns = {c.name: c for c in relation.columns}
        key_columns = tuple(columns[i.value] for i in statement.key)
        key_format = sink_format(key_ast, key_columns, catalog) if key_columns else None
    desc = SinkDesc(
        source=relation.id,
        connection=connection.id,
        topic=topic.string.value,
        value_format=value_format,
        envelope=envelope,
        key=tuple(i.value for i in statement.key),
        key_format=key_format,
        partition_count=None if partition_count == -1 else partition_count,
    )
    (item_id,) = catalog.allocate_ids(1)
    registries = (f.registry for f in (key_format, value_format) if f is not None and f.registry)
    depends = (relation.id, connection.id, *registries)
    return Item(
        item_id,
        name,
        kinds.SINK,
        statement.to_sql(),
        timeline=relation.timeline,
        depends_on=tuple(dict.fromkeys(depends)),
        details=desc,
    )


def _check_dead_letter_sink(statement: ast.CreateSink, relation: Item) -> None:
    """A dead-letter sink writes each bad message's own key and value bytes, so there is
    nothing to encode and no change to envelope."""
    clauses = [
        (statement.key and statement.key[0].span, "KEY"),
        (statement.format and statement.format.span, "FORMAT"),
        (statement.envelope and statement.envelope.span, "ENVELOPE"),
    ]
    for span, clause in clauses:
        if span:
            raise InvalidParameterValue(
                f'a sink from dead-letter table "{relation.name}" takes no {clause}: it writes '
                "each bad message's original key, value and headers, in Kafka Connect's "
                "dead-letter format",
                span=span,
            )


def _sink_clauses(statement: ast.CreateSink) -> tuple[ast.FormatSpec, ast.EnvelopeUpsert | ast.EnvelopeDebezium]:
    """FORMAT and ENVELOPE, which a sink from anything but a dead-letter table gives."""
    if statement.format is None:
        raise InvalidParameterValue(
            "CREATE SINK requires a FORMAT: only a sink from a dead-letter table takes none",
            span=statement.span,
        )
    if statement.envelope is None:
        raise InvalidParameterValue("ENVELOPE clause is required", span=statement.format.span)
    return statement.format, statement.envelope


# Materialize's texts (its plan/statement/ddl.rs and plan/error.rs), in its order of checks.
PARTITION_COUNT = "PARTION COUNT for sink topics must be a positive integer or -1 for broker default"
KEY_SELECTION = "See: https://materialize.com/s/sink-key-selection"


def _check_sink_key(
    statement: ast.CreateSink, relation: Item, envelope: ast.EnvelopeUpsert | ast.EnvelopeDebezium, catalog: Catalog
) -> None:
    """KEY names distinct columns of the relation; an upsert sink's is a key known to be
    unique (`plan.keys`) unless NOT ENFORCED, and an upsert sink has one."""
    seen = set()
    for ident in statement.key:
        if ident.value in seen:
            raise DuplicateColumn(f"Repeated column name in sink key: {ident.value}", span=ident.span)
        seen.add(ident.value)
    for ident in statement.key:
        if relation.column(ident.value) is None:
            raise UndefinedColumn(f"No such column: {ident.value}", span=ident.span)
    if not isinstance(envelope, ast.EnvelopeUpsert):
        return
    if not statement.key:
        raise InvalidParameterValue(
            "upsert sinks must specify a key", span=envelope.span, hint=KEY_SELECTION
        )
    keys = known_keys(relation, catalog)
    if statement.key_not_enforced or any(set(key) <= seen for key in keys):
        return
    known = (
        "The following keys are known to be unique for the underlying relation:\n"
        + "\n".join("  (" + ", ".join(_quoted(c) for c in key) + ")" for key in keys)
        if keys
        else "There are no known valid unique keys for the underlying relation."
    )
    desired = ", ".join(_quoted(i.value) for i in statement.key)
    raise InvalidParameterValue(
        "upsert key could not be validated as unique",
        span=statement.key[0].span,
        detail=f"Materialize could not prove that the specified upsert envelope key ({desired}) "
        f"was a unique key of the underlying relation {_quoted(relation.name)}. {known}",
        hint=KEY_SELECTION,
    )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def plan_drop(statement: ast.Drop, catalog: Catalog) -> DropPlan | NoticePlan:
    kind = kinds.KIND_KEYWORDS[statement.kind]
    status = f"DROP {statement.kind}"
    targets: list[Item] = []
    notices = []
    for name in statement.names:
        item = catalog.get(item_name(name))
        if item is None:
            if statement.if_exists:
                notices.append(f"{kind} \"{name}\" does not exist, skipping")
                continue
            raise unknown_item(str(name), name.span, (i.name for i in catalog))
        if item.kind == kinds.DEAD_LETTER_TABLE and kind == kinds.TABLE:
            source = catalog.by_id(item.dead_letter_desc.source)
            raise WrongObjectType(
                f'cannot drop dead-letter table "{item.name}": it is dropped with its source '
                f'"{source.name}"',
                span=name.span,
            )
        if item.kind != kind:
            raise WrongObjectType(f'"{item.name}" is {kinds.a_kind(item.kind)}, not {kinds.a_kind(kind)}', span=name.span)
        targets.append(item)
    if not targets:
        return NoticePlan("; ".join(notices), status)
    dropped = _with_owned_and_dependents(catalog, targets, statement)
    return DropPlan(tuple(i.id for i in dropped), status)


def _with_owned_and_dependents(catalog: Catalog, targets: list[Item], statement: ast.Drop):
    """The targets, what they own (a source's dead-letter table, a relation's indexes) and
    (with CASCADE) everything built on them."""
    chosen: dict[str, Item] = {}
    stack = list(targets)
    while stack:
        item = stack.pop()
        if item.id in chosen:
            continue
        chosen[item.id] = item
        for dependent in catalog.dependents(item.id):
            owned = dependent.kind == kinds.INDEX or (
                dependent.kind == kinds.DEAD_LETTER_TABLE and dependent.dead_letter_desc.source == item.id
            )
            if owned or statement.cascade:
                stack.append(dependent)
            elif dependent.id not in chosen and dependent not in targets:
                raise DependentObjectsStillExist(
                    f'cannot drop {item.kind} "{item.name}": still depended upon by '
                    f'{dependent.kind} "{dependent.name}"',
                    span=statement.span,
                    hint="use DROP ... CASCADE to drop the dependent objects too",
                )
    return list(chosen.values())
