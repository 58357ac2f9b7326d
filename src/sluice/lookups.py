"""What a statement needs from outside sluice before it is planned or carried out, asked
of the systems that hold it: the schemas its schema-registry subjects have now, the low
watermarks of a new source's topic (which must exist), and whether a connection's brokers
or registry answer (`VALIDATE CONNECTION`, CREATE CONNECTION). Failures are SQL errors in
Materialize's words, spanned where the statement names what failed. The planner stays
pure: it gets these as `Facts`."""

from __future__ import annotations

from sluice.catalog import items as kinds
from sluice.catalog.items import Item
from sluice.catalog.secrets import connection_options, registry_login
from sluice.catalog.store import Catalog
from sluice.errors import ExternalSystemError, UndefinedObject
from sluice.kafka.registry import SchemaRegistry
from sluice.plan import Facts, registry_subjects
from sluice.plan.facts import RegistrySchema, created_source
from sluice.syntax import ast


def facts(statement: ast.Statement, catalog: Catalog, check_kafka: bool) -> Facts:
    """The facts planning `statement` needs (`check_kafka=False`: no topic is looked at)."""
    topic_lows = _topic_lows(statement, catalog) if check_kafka else ()
    schemas = {}
    for connection_name, subject, span in registry_subjects(statement):
        item = catalog.get(connection_name)
        if item is None or item.kind != kinds.CONNECTION:
            continue  # the planner reports the bad reference
        if item.connection_desc.connection_type != kinds.SCHEMA_REGISTRY:
            continue
        try:
            schema_id, schema = _registry(item, catalog).latest(subject)
        except ExternalSystemError as e:
            e.span = e.span or span
            raise
        schemas[(connection_name, subject)] = RegistrySchema(schema_id, schema)
    return Facts(schemas, topic_lows)


def validate(connection: Item, catalog: Catalog) -> None:
    """Reach a connection's brokers or schema registry as Materialize validates a
    connection; what failed, in Materialize's words, is an `ExternalSystemError`."""
    if connection.connection_desc.connection_type != kinds.KAFKA:
        _registry(connection, catalog).validate()
        return
    from sluice.kafka.client import (
        KafkaReadError,
        connection_config,
        validate_connection,
    )

    options = connection_options(connection.connection_desc, catalog)
    try:
        validate_connection(",".join(connection.connection_desc.brokers), connection_config(options.all()))
    except KafkaReadError as e:
        raise ExternalSystemError(str(e)) from None


def _registry(connection: Item, catalog: Catalog) -> SchemaRegistry:
    login = registry_login(connection.connection_desc, catalog)
    return SchemaRegistry(connection.connection_desc.registry_url, *(login or ()))


def _topic_lows(statement: ast.Statement, catalog: Catalog) -> tuple[tuple[int, int], ...]:
    """A source's topic must exist when the source is created: its partitions' low
    watermarks."""
    source = created_source(statement)
    if source is None:
        return ()
    topic = next((o.string for o in source.kafka_options if o.name == "TOPIC"), None)
    connection = catalog.get(source.connection.name)
    if topic is None or connection is None or connection.kind != kinds.CONNECTION:
        return ()  # the planner reports these
    if connection.connection_desc.connection_type != kinds.KAFKA:
        return ()
    from sluice.kafka.client import (
        KafkaReadError,
        TopicMissing,
        connection_config,
        watermarks,
    )

    brokers = ",".join(connection.connection_desc.brokers)
    config = connection_config(connection_options(connection.connection_desc, catalog).all())
    try:
        marks = watermarks(brokers, topic.value, config)
    except TopicMissing:
        raise UndefinedObject(
            "Topic does not exist",
            span=topic.span,
            detail=f"topic '{topic.value}' is not on connection {connection.name} ({brokers})",
            hint=f"create it: \\produce {topic.value} --create in the REPL, or"
            f" sluice kafka create-topic {topic.value} --broker {brokers}",
        ) from None
    except KafkaReadError as e:
        raise ExternalSystemError(
            f"cannot read topic '{topic.value}' from connection {connection.name}: {e}",
            span=source.connection.span,
        ) from None
    return tuple((partition, low) for partition, (low, _) in sorted(marks.items()))
