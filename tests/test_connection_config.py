"""A Kafka connection's security options reach every Kafka client sluice makes."""

from __future__ import annotations

import pytest

import sluice
from sluice.catalog.secrets import connection_options
from sluice.kafka.client import connection_config


def options_of(data_dir, script: str):
    """The options of connection `k` that the script creates."""
    with sluice.Session(data_dir, check_kafka=False) as session:
        session.execute_script(script)
        catalog = session.catalog.current
        return connection_options(catalog.get("k").details, catalog)


def test_options_map_to_librdkafka_properties(tmp_path) -> None:
    options = options_of(
        tmp_path,
        "CREATE SECRET pw AS 'p''w';"
        "CREATE CONNECTION k TO KAFKA (BROKER 'h:1', SECURITY PROTOCOL = sasl_ssl, "
        "SASL MECHANISMS = 'scram-sha-256', SASL USERNAME = 'u', SASL PASSWORD = SECRET pw, "
        "SSL CERTIFICATE AUTHORITY = '-----BEGIN CERTIFICATE-----')",
    )
    # The secret's value is kept apart from what was given in the clear.
    assert connection_config(options.clear) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "u",
        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----",
    }
    assert connection_config(options.secret) == {"sasl.password": "p'w"}
    assert "p'w" not in repr(options)


def test_sasl_options_alone_mean_sasl_ssl_as_in_materialize(tmp_path) -> None:
    options = options_of(
        tmp_path,
        "CREATE SECRET pw AS 'x';"
        "CREATE CONNECTION k TO KAFKA (BROKER 'h:1', SASL MECHANISMS = PLAIN, "
        "SASL USERNAME = SECRET pw, SASL PASSWORD = SECRET pw)",
    )
    assert connection_config(options.all()) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "x",
        "sasl.password": "x",
    }


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
