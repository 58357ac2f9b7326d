"""A Kafka connection's security options reach every Kafka client sluice makes."""

from __future__ import annotations

import pytest

import sluice
from sluice.kafka.client import connection_config


def test_options_map_to_librdkafka_properties() -> None:
    statement = sluice.parse_one(
        "CREATE CONNECTION k TO KAFKA (BROKER 'h:1', SECURITY PROTOCOL = SASL_SSL, "
        "SASL MECHANISMS = 'PLAIN', SASL USERNAME = 'u', SASL PASSWORD = 'p''w', "
        "SSL CERTIFICATE AUTHORITY = '-----BEGIN CERTIFICATE-----')"
    )
    properties = tuple((o.name, o.value.to_sql()) for o in statement.options)
    assert connection_config(properties) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p'w",
        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----",
    }


def test_a_secret_cannot_be_resolved() -> None:
    with pytest.raises(sluice.SqlError, match="secret store") as info:
        connection_config((("SASL PASSWORD", "SECRET pw"),))
    assert info.value.code == "0A000"


def test_the_security_protocol_is_used_to_talk_to_the_broker(kafka) -> None:
    kafka.create_topic("t", 1)
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION plain TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            f"CREATE CONNECTION tls TO KAFKA (BROKER '{kafka.bootstrap}', SECURITY PROTOCOL = SSL)"
        )
        session.execute("CREATE SOURCE ok FROM KAFKA CONNECTION plain (TOPIC 't') FORMAT TEXT")
        # The embedded broker speaks plaintext only: a TLS client cannot read its metadata.
        with pytest.raises(sluice.SqlError, match="cannot read topic 't' from connection tls"):
            session.execute("CREATE SOURCE bad FROM KAFKA CONNECTION tls (TOPIC 't') FORMAT TEXT")
