"""What `sluice kafka serve --port P` costs: the embedded broker reached directly (its own
ephemeral port) against through the forwarding listener on P, producing and then
consuming the same messages with confluent-kafka. Prints the median of a few rounds."""

from __future__ import annotations

import socket
import statistics
import time

from confluent_kafka import Consumer, TopicPartition

from sluice.kafka.embedded import EmbeddedKafka, produce

MESSAGES = 40_000  # 100-byte values: 4 MB, under the mock's 5 MiB a partition
ROUNDS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(port: int | None) -> tuple[float, float]:
    with EmbeddedKafka(port=port) as kafka:
        kafka.create_topic("t", 1)
        began = time.perf_counter()
        produce(kafka.bootstrap, "t", [(None, b"x" * 100)] * MESSAGES, partition=0)
        produced = time.perf_counter() - began
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "bench"})
        consumer.assign([TopicPartition("t", 0, 0)])
        began, seen = time.perf_counter(), 0
        while seen < MESSAGES:
            seen += sum(m.error() is None for m in consumer.consume(10_000, 1))
        consumed = time.perf_counter() - began
        consumer.close()
    return produced, consumed


def main() -> None:
    print(f"forwarding listener: {MESSAGES} messages of 100 bytes, median of {ROUNDS} rounds")
    for name, port in (("direct", None), ("forwarded", free_port())):
        rounds = [one_round(port) for _ in range(ROUNDS)]
        produced = statistics.median(r[0] for r in rounds)
        consumed = statistics.median(r[1] for r in rounds)
        print(f"  {name:<10} produce {produced:6.2f} s ({MESSAGES / produced:9,.0f} msg/s)"
              f"   consume {consumed:6.2f} s ({MESSAGES / consumed:9,.0f} msg/s)")


if __name__ == "__main__":
    main()
