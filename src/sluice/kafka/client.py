"""Kafka metadata through confluent-kafka, with no Spark: consumers, watermarks, topics.

Used by the reader inside Spark and, before planning, by the session (a topic a source
names must exist). Failures are `KafkaReadError`s whose text names the topic.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from sluice.errors import FeatureNotSupported

METADATA_TIMEOUT_SECONDS = 10.0


class KafkaReadError(RuntimeError):
    """A topic's metadata or a range of it could not be read."""


class TopicMissing(KafkaReadError):
    pass


# CREATE CONNECTION … TO KAFKA options → librdkafka configuration properties.
_CLIENT_PROPERTIES = {
    "SECURITY PROTOCOL": "security.protocol",
    "SASL MECHANISMS": "sasl.mechanisms",
    "SASL USERNAME": "sasl.username",
    "SASL PASSWORD": "sasl.password",
    "SSL CERTIFICATE AUTHORITY": "ssl.ca.pem",
    "SSL CERTIFICATE": "ssl.certificate.pem",
    "SSL KEY": "ssl.key.pem",
}


def connection_config(properties: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The client configuration of a Kafka connection's options (name, canonical SQL).
    A `SECRET name` value cannot be resolved: sluice has no secret store."""
    config = {}
    for name, sql in properties:
        key = _CLIENT_PROPERTIES.get(name)
        if key is None:
            continue
        if sql.upper().startswith("SECRET "):
            raise FeatureNotSupported(
                f"{name} refers to a secret, and sluice has no secret store",
                hint="give the value as a string",
            )
        config[key] = sql[1:-1].replace("''", "'") if sql.startswith("'") else sql.upper()
    return config


def consumer(bootstrap: str, config: dict) -> Consumer:
    """A consumer of sluice's settings; a `KafkaReadError` if librdkafka refuses the
    connection's configuration (a value it does not know, a certificate it cannot read)."""
    try:
        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "sluice",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                # A deleted offset is an error to report, never a silent jump to either end.
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 10,
                **config,
            }
        )
    except (KafkaException, ValueError, TypeError) as e:
        reason = e.args[0].str() if isinstance(e, KafkaException) else str(e)
        raise KafkaReadError(f"invalid connection configuration: {reason}") from None


def watermarks(
    bootstrap: str, topic: str, config: dict, timeout: float = METADATA_TIMEOUT_SECONDS
) -> dict[int, tuple[int, int]]:
    """`{partition: (low, high)}` of the topic."""
    client = consumer(bootstrap, config)
    try:
        metadata = client.list_topics(topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is None or (
            found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            raise TopicMissing(f"topic {topic!r} does not exist")
        if found.error is not None:
            raise KafkaReadError(f"topic {topic!r}: {found.error.str()}")
        return {
            p: client.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            for p in sorted(found.partitions)
        }
    except KafkaException as e:
        raise KafkaReadError(f"topic {topic!r}: {e.args[0].str()}") from None
    finally:
        client.close()


def offsets_for_timestamp(
    bootstrap: str,
    topic: str,
    config: dict,
    timestamp_ms: int,
    marks: dict[int, tuple[int, int]],
) -> dict[int, int]:
    """Per partition, the first offset whose message timestamp is at least `timestamp_ms`.

    Brokers answer this from their time index; where a broker answers "none" (-1, as the
    embedded mock always does) but the partition's last message is late enough, a binary
    search over the partition's messages finds it, so both behave the same.
    """
    client = consumer(bootstrap, config)
    try:
        asked = [TopicPartition(topic, p, timestamp_ms) for p in marks]
        answered = {tp.partition: tp.offset for tp in client.offsets_for_times(asked, timeout=10)}
        result = {}
        for partition, (low, high) in marks.items():
            offset = answered.get(partition, -1)
            if offset < 0:
                offset = _search(client, topic, partition, low, high, timestamp_ms)
            result[partition] = offset
        return result
    except KafkaException as e:
        raise KafkaReadError(f"topic {topic!r}: {e.args[0].str()}") from None
    finally:
        client.close()


def _search(client: Consumer, topic: str, partition: int, low: int, high: int, ts: int) -> int:
    """The first offset in [low, high) with timestamp >= ts (high if none), assuming
    timestamps grow with offsets as Kafka's own time index does."""
    while low < high:
        middle = (low + high) // 2
        if _timestamp_at(client, topic, partition, middle) >= ts:
            high = middle
        else:
            low = middle + 1
    return low


def _timestamp_at(client: Consumer, topic: str, partition: int, offset: int) -> int:
    client.assign([TopicPartition(topic, partition, offset)])
    for _ in range(20):
        for message in client.consume(num_messages=1, timeout=0.5):
            if message.error() is None:
                return message.timestamp()[1]
            if message.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaReadError(f"topic {topic!r} partition {partition}: {message.error().str()}")
    raise KafkaReadError(f"topic {topic!r} partition {partition}: no message at offset {offset}")
