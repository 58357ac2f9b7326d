"""Kafka metadata through confluent-kafka, with no Spark: consumers, watermarks, topics.

Used by the reader inside Spark and, before planning, by the session (a topic a source
names must exist). Failures are `KafkaReadError`s whose text names the topic.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

METADATA_TIMEOUT_SECONDS = 10.0


class KafkaReadError(RuntimeError):
    """A topic's metadata or a range of it could not be read."""


class TopicMissing(KafkaReadError):
    pass


def consumer(bootstrap: str, config: dict) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sluice",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            **config,
        }
    )


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
