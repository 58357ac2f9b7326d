"""CREATE CONNECTION, with Materialize's checks of its options, and CREATE / ALTER SECRET.

Where Materialize insists on a secret (SASL PASSWORD, PASSWORD, SSL KEY) a string is
refused, so no password is ever written into the catalog; elsewhere (SASL USERNAME, SSL
CERTIFICATE, USERNAME, …) either may be given. A `SECRET name` resolves to the secret's
item, which the connection then depends on. Planning never reads a secret's value: a
CREATE or ALTER SECRET plan carries the new value to the session, which stores it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sluice.catalog import items as kinds
from sluice.catalog.items import ConnectionDesc, Item
from sluice.catalog.store import Catalog
from sluice.errors import FeatureNotSupported, InvalidParameterValue
from sluice.plan.names import ensure_free, item_name, resolve
from sluice.plan.plans import NoticePlan, SecretPlan
from sluice.syntax import ast

# Options whose value must be a secret.
_SECRET_ONLY = ("SASL PASSWORD", "PASSWORD", "SSL KEY")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Mechanisms librdkafka knows that need settings a connection cannot give (Kerberos, tokens).
_UNSUPPORTED_MECHANISMS = ("GSSAPI", "OAUTHBEARER")
_SASL_OPTIONS = ("SASL MECHANISMS", "SASL USERNAME", "SASL PASSWORD")
_SSL_OPTIONS = ("SSL CERTIFICATE AUTHORITY", "SSL CERTIFICATE", "SSL KEY")
_ADDRESS_OPTIONS = ("BROKER", "BROKERS", "URL")


def plan_create_connection(statement: ast.CreateConnection, catalog: Catalog) -> Item:
    name = item_name(statement.name)
    ensure_free(catalog, name, statement.name.span)
    options = _unique(statement.options)
    secrets = tuple(
        (o.name, resolve(catalog, o.value.name, kinds.SECRET).id)
        for o in statement.options
        if isinstance(o.value, ast.SecretRef)
    )
    for option in statement.options:
        if option.name in _SECRET_ONLY and not isinstance(option.value, ast.SecretRef):
            raise InvalidParameterValue(
                f"invalid {option.name} option value: must provide a secret value",
                span=option.value.span,
            )
    properties = tuple(
        (o.name, o.value.to_sql()) for o in statement.options if o.name not in _ADDRESS_OPTIONS
    )
    if statement.connection_type == ast.CreateConnection.KAFKA:
        connection_type, brokers, url = kinds.KAFKA, _brokers(options, statement), None
        properties += _security_protocol(options, statement)
    else:
        connection_type, brokers, url = kinds.SCHEMA_REGISTRY, (), _registry_url(options, statement)
    (item_id,) = catalog.allocate_ids(1)
    return Item(
        item_id,
        name,
        kinds.CONNECTION,
        statement.to_sql(),
        depends_on=tuple(dict.fromkeys(secret_id for _, secret_id in secrets)),
        details=ConnectionDesc(connection_type, brokers, url, properties, secrets),
    )


def _unique(options: tuple[ast.ConnectionOption, ...]) -> dict[str, ast.ConnectionOption]:
    seen: dict[str, ast.ConnectionOption] = {}
    for option in options:
        if option.name in seen:
            raise InvalidParameterValue(f"{option.name} specified more than once", span=option.span)
        seen[option.name] = option
    return seen


def _brokers(options: dict[str, ast.ConnectionOption], statement: ast.CreateConnection) -> tuple[str, ...]:
    if "BROKER" in options and "BROKERS" in options:
        raise InvalidParameterValue("cannot specify both BROKER and BROKERS", span=options["BROKERS"].span)
    addresses: tuple[ast.StringLiteral, ...]
    if "BROKER" in options:
        addresses = (options["BROKER"].string,)
    elif "BROKERS" in options:
        addresses = options["BROKERS"].strings
    else:
        raise InvalidParameterValue("KAFKA connection requires BROKER", span=statement.span)
    # An empty address is validation's to refuse (as Materialize's does), not planning's.
    return tuple(a.value for a in addresses)


def _security_protocol(
    options: dict[str, ast.ConnectionOption], statement: ast.CreateConnection
) -> tuple[tuple[str, str], ...]:
    """Materialize's checks of a Kafka connection's security options. Without SECURITY
    PROTOCOL, SASL options mean SASL_SSL and SSL options SSL (the protocol is returned as
    an extra property then); with none of them, the connection is PLAINTEXT."""
    given = [name for name in options if name in _SASL_OPTIONS + _SSL_OPTIONS]
    inferred: tuple[tuple[str, str], ...]
    if "SECURITY PROTOCOL" in options:
        given_protocol = options["SECURITY PROTOCOL"]
        protocol = given_protocol.word.upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidParameterValue(f"unknown security protocol: {protocol}", span=given_protocol.value.span)
        inferred = ()
    else:
        protocol = "SASL_SSL" if set(given) & set(_SASL_OPTIONS) else "SSL" if given else "PLAINTEXT"
        inferred = (("SECURITY PROTOCOL", protocol),) if given else ()
    outstanding = set(given)
    if protocol in ("SSL", "SASL_SSL"):
        if "SSL CERTIFICATE" in options and "SSL KEY" not in options:
            raise InvalidParameterValue(
                "SSL KEY must be specified with SSL CERTIFICATE", span=options["SSL CERTIFICATE"].span
            )
        outstanding -= {"SSL CERTIFICATE AUTHORITY", "SSL CERTIFICATE"}
        if "SSL CERTIFICATE" in options:
            outstanding.discard("SSL KEY")
    if protocol.startswith("SASL_"):
        for required in _SASL_OPTIONS:
            if required not in options:
                where = options.get("SECURITY PROTOCOL", statement)
                raise InvalidParameterValue(f"{required} must be specified", span=where.span)
        _check_mechanism(options["SASL MECHANISMS"])
        outstanding -= set(_SASL_OPTIONS)
    for name in given:
        if name in outstanding:
            raise InvalidParameterValue(
                f"option {name} not supported with this configuration", span=options[name].span
            )
    return inferred


def _check_mechanism(option: ast.ConnectionOption) -> None:
    mechanism = option.word.upper()
    if mechanism in _UNSUPPORTED_MECHANISMS:
        raise FeatureNotSupported(
            f"SASL mechanism {mechanism} is not supported",
            span=option.value.span,
            hint=f"use one of {', '.join(SASL_MECHANISMS)}",
        )
    if mechanism not in SASL_MECHANISMS:
        raise InvalidParameterValue(f"unsupported SASL mechanism: {mechanism}", span=option.value.span)


def _registry_url(options: dict[str, ast.ConnectionOption], statement: ast.CreateConnection) -> str:
    if "URL" not in options:
        raise InvalidParameterValue("CONFLUENT SCHEMA REGISTRY connection requires URL", span=statement.span)
    url = options["URL"].string
    parts = urlsplit(url.value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidParameterValue(
            "invalid CONNECTION: URL must be http:// or https:// and specify domain name", span=url.span
        )
    if "PASSWORD" in options and "USERNAME" not in options:
        raise InvalidParameterValue(
            "invalid CONNECTION: PASSWORD requires USERNAME", span=options["PASSWORD"].span
        )
    for name in _SSL_OPTIONS:
        if name in options:
            raise FeatureNotSupported(
                f"{name} on a schema registry connection is not supported", span=options[name].span
            )
    return url.value


def plan_create_secret(statement: ast.CreateSecret, catalog: Catalog) -> SecretPlan | NoticePlan:
    name = item_name(statement.name)
    if statement.if_not_exists and catalog.get(name) is not None:
        return NoticePlan(f"catalog item '{name}' already exists, skipping", "CREATE SECRET")
    ensure_free(catalog, name, statement.name.span)
    (item_id,) = catalog.allocate_ids(1)
    # The stored CREATE text, which SHOW CREATE prints, has the value redacted.
    item = Item(item_id, name, kinds.SECRET, statement.redacted().to_sql())
    return SecretPlan(item_id, statement.value.value, "CREATE SECRET", item)


def plan_alter_secret(statement: ast.AlterSecret, catalog: Catalog) -> SecretPlan | NoticePlan:
    if statement.if_exists and catalog.get(item_name(statement.name)) is None:
        return NoticePlan(f'secret "{statement.name}" does not exist, skipping', "ALTER SECRET")
    secret = resolve(catalog, statement.name, kinds.SECRET)
    return SecretPlan(secret.id, statement.value.value, "ALTER SECRET")
