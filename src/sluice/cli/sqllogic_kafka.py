"""The sqllogic runner's Kafka directives, run against a file's broker: `kafka-create-topic`,
`kafka-schema` (the file's Avro schemas, by name), `kafka-ingest` (the messages a record
lists, in bytes, JSON or Avro, keyed or not, with headers) and `kafka-verify` (the messages
a topic holds, compared by `kafka_verify`).
"""

from __future__ import annotations

import json
from typing import Any

from sluice.cli import kafka_verify
from sluice.cli.sqllogic_format import Record, RecordFailed
from sluice.kafka.encode import encode_value, keyed_message


class KafkaDirectives:
    """The Kafka directives of one file, against its broker `kafka`."""

    def __init__(self, kafka: Any) -> None:
        self.kafka = kafka
        self.bootstrap: str = kafka.bootstrap
        self.schemas: dict[str, tuple[int, Any]] = {}  # name → (schema id, parsed schema)

    def run(self, record: Record) -> None:
        """Run a `kafka-…` record; `RecordFailed` when it does not do what it expects."""
        {
            "kafka-create-topic": self._create_topic,
            "kafka-schema": self._schema,
            "kafka-ingest": self._ingest,
            "kafka-verify": self._verify,
        }[record.kind](record)

    def _create_topic(self, record: Record) -> None:
        self.kafka.create_topic(record.args["name"], int(record.args.get("partitions", "1")))

    def _schema(self, record: Record) -> None:
        import fastavro

        name = record.args["name"]
        text = "\n".join(line for _, line in record.body)
        try:
            parsed = fastavro.parse_schema(json.loads(text))
        except Exception as e:
            raise RecordFailed(f"kafka-schema {name}: not an Avro schema: {e}") from None
        schema_id = self.schemas[name][0] if name in self.schemas else len(self.schemas) + 1
        self.schemas[name] = (schema_id, parsed)

    def _ingest(self, record: Record) -> None:
        from sluice.kafka.embedded import produce

        args = record.args
        messages = self._listed(record)
        produce(
            self.bootstrap,
            args["topic"],
            [(m.key, m.value, list(m.headers)) for m in messages],
            partition=int(args["partition"]) if "partition" in args else None,
            timestamp_ms=int(args["timestamp"]) if "timestamp" in args else None,
        )

    def _verify(self, record: Record) -> None:
        from sluice.kafka.consume import read_committed

        args = record.args
        expected = self._listed(record)
        timeout = float(args.get("timeout", kafka_verify.DEFAULT_TIMEOUT))
        got = read_committed(self.bootstrap, args["topic"], len(expected), timeout)
        report = kafka_verify.compare(args, expected, got, self.schemas)
        if report is not None:
            raise RecordFailed(f"kafka-verify topic={args['topic']}: the topic's messages differ", report)

    def _listed(self, record: Record) -> list[kafka_verify.Message]:
        """The messages a `kafka-ingest` or `kafka-verify` record lists."""
        args = record.args
        try:
            return kafka_verify.listed_messages(args, record.body, lambda line: self._message(args, line))
        except kafka_verify.BadLine as e:
            raise RecordFailed(f"{record.kind}: {e}", [f"    {e.line}"]) from None

    def _message(self, args: dict[str, str], line: str) -> tuple[bytes | None, bytes | None]:
        def value(text: str) -> bytes:
            return self._encode(text, args.get("format", "bytes"), args.get("schema"), args)

        key_format = args.get("key-format")
        if key_format is None:
            return None, value(line)
        if key_format == "bytes":
            return keyed_message(line, args.get("key-terminator", ":"), value)
        try:
            _, end = json.JSONDecoder().raw_decode(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"the key is not JSON: {e}") from None
        key_text, rest = line[:end], line[end:]
        if rest and not rest.startswith(" "):
            raise ValueError("expected a space between the key and the value")
        value_text = rest[1:]
        key = self._encode(key_text, key_format, args.get("key-schema"), args)
        return key, value(value_text) if value_text else None

    def _encode(self, text: str, fmt: str, schema: str | None, args: dict[str, str]) -> bytes:
        if fmt != "avro":
            return encode_value(text)
        if schema not in self.schemas:
            raise ValueError(f"no kafka-schema named {schema!r}")
        schema_id, parsed = self.schemas[schema]
        framed = args.get("confluent-wire-format", "true") == "true"
        return encode_value(text, parsed, schema_id if framed else None, schema_name=f"schema {schema}")
