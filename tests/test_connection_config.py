"""A Kafka connection's security options reach every Kafka client sluice makes; a
connection is validated at CREATE; a source's TOPIC METADATA REFRESH INTERVAL reaches its
clients."""

from __future__ import annotations

import json
import time

import confluent_kafka
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog.secrets import connection_options
from sluice.kafka.client import connection_config
from sluice.spark.kafka_source import Options
from sluice.storage.source import reader_options
from tests.support.registry import Registry


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
    tls = f"CREATE CONNECTION tls TO KAFKA (BROKER '{kafka.bootstrap}', SECURITY PROTOCOL = SSL)"
    with sluice.Session() as session:
        session.execute(f"CREATE CONNECTION plain TO KAFKA (BROKER '{kafka.bootstrap}')")
        # Validating it fails: the broker resets every TLS handshake (Materialize's words).
        # librdkafka names the plaintext listener for the first handshake only, and whether
        # that reaches the error callback before its brokers are down is a race of its own.
        with pytest.raises(sluice.SqlError) as refused:
            session.execute(tls)
        assert refused.value.code == "58000"
        assert refused.value.message in ("Broker does not support SSL connections", "All brokers down")
        session.execute(tls + " WITH (VALIDATE = false)")
        session.execute("CREATE SOURCE ok FROM KAFKA CONNECTION plain (TOPIC 't') FORMAT TEXT")
        # The embedded broker speaks plaintext only: a TLS client cannot read its metadata.
        with pytest.raises(sluice.SqlError, match="cannot read topic 't' from connection tls"):
            session.execute("CREATE SOURCE bad FROM KAFKA CONNECTION tls (TOPIC 't') FORMAT TEXT")


def test_a_registry_connection_is_validated_by_listing_its_subjects(tmp_path) -> None:
    registry = Registry({"t-value": "string"}, login=("user", "right"))
    create = "CREATE CONNECTION {} TO CONFLUENT SCHEMA REGISTRY (URL '{}', USERNAME 'user', PASSWORD SECRET {})"
    try:
        with sluice.Session(tmp_path) as session:
            session.execute("CREATE SECRET right AS 'right'")
            session.execute("CREATE SECRET wrong AS 'wrong'")
            session.execute(create.format("csr", registry.url, "right"))
            with pytest.raises(sluice.SqlError) as refused:
                session.execute(create.format("bad", registry.url, "wrong"))
            assert "bad" not in session.names()
            session.execute(create.format("later", registry.url, "wrong") + " WITH (VALIDATE = false)")
            with pytest.raises(sluice.SqlError) as later:
                session.execute("VALIDATE CONNECTION later")
            registry.failing = 503
            with pytest.raises(sluice.SqlError) as failing:
                session.execute("VALIDATE CONNECTION csr")
    finally:
        registry.close()
    # Materialize's registry client's words: the registry's error code and message, or
    # the HTTP status when the answer holds none.
    assert (refused.value.code, refused.value.message) == ("58000", "server error 401: Unauthorized")
    assert later.value.message == "server error 401: Unauthorized"
    assert failing.value.message == "server error 503: unable to decode error details"
    assert registry.answered["subjects"] == 2 and registry.refused["subjects"] == 2


def test_topic_metadata_refresh_interval_sets_the_source_clients_refresh(kafka, tmp_path) -> None:
    """A source's clients take its TOPIC METADATA REFRESH INTERVAL as librdkafka's
    topic.metadata.refresh.interval.ms: librdkafka's own count of the metadata requests it
    sent shows the refresh happening that often."""
    kafka.create_topic("t", 1)
    with sluice.Session(tmp_path) as session:
        session.execute(f"CREATE CONNECTION k TO KAFKA (BROKER '{kafka.bootstrap}')")
        session.execute(
            "CREATE SOURCE often FROM KAFKA CONNECTION k (TOPIC 't', TOPIC METADATA REFRESH INTERVAL '100ms') FORMAT TEXT"
        )
        session.execute("CREATE SOURCE plain FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT")
        catalog = session.catalog.current
        options = {name: Options.of(reader_options(catalog.get(name).details, catalog)) for name in ("often", "plain")}
    assert options["often"].config == {"topic.metadata.refresh.interval.ms": "100"}
    assert options["plain"].config == {}
    requests = {name: _metadata_requests(o, seconds=2.0) for name, o in options.items()}
    assert requests["often"] >= 8, requests
    assert requests["plain"] <= 3, requests


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.integers(-2, 4000), st.sampled_from([("ms", 1), (" seconds", 1000), ("min", 60_000), ("hr", 3_600_000)])),
        min_size=1,
        max_size=4,
    )
)
def test_topic_metadata_refresh_interval_is_the_sum_of_its_parts(parts) -> None:
    """Any interval text of parts: its sum in milliseconds when in [0, 1 hour], else
    Materialize's error for the end it is past."""
    text = " ".join(f"{n}{unit}" for n, (unit, _) in parts)
    total = sum(n * ms for n, (_, ms) in parts)
    with sluice.Session(check_kafka=False) as session:
        session.execute("CREATE CONNECTION k TO KAFKA (BROKER 'h:1')")
        create = f"CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't', TOPIC METADATA REFRESH INTERVAL '{text}') FORMAT TEXT"
        if 0 <= total <= 3_600_000:
            session.execute(create)
            desc = session.catalog.current.get("s").details
            assert desc.topic_metadata_refresh_interval_ms == total
            assert json.loads(reader_options(desc, session.catalog.current)["config"]) == {
                "topic.metadata.refresh.interval.ms": str(total)
            }
        else:
            with pytest.raises(sluice.SqlError) as refused:
                session.execute(create)
            assert refused.value.message == (
                "cannot convert negative interval to duration" if total < 0
                else "TOPIC METADATA REFRESH INTERVAL cannot be greater than 1 hour"
            )


def _metadata_requests(options: Options, seconds: float) -> int:
    """How many metadata requests a client of the reader's configuration sends while it
    reads the topic for `seconds` (librdkafka's statistics)."""
    stats: list[dict] = []
    client = confluent_kafka.Consumer(
        {"bootstrap.servers": options.bootstrap, "group.id": "refresh", **options.config,
         "statistics.interval.ms": 200, "stats_cb": lambda text: stats.append(json.loads(text))}
    )
    try:
        client.assign([confluent_kafka.TopicPartition(options.topic, 0, 0)])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            client.poll(0.1)
    finally:
        client.close()
    return sum(broker["req"].get("Metadata", 0) for broker in stats[-1]["brokers"].values())
