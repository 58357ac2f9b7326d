"""Talking to Kafka's world: the embedded broker, metadata and retries (`client`, `retry`),
message decoding and encoding, sinks' progress records and the Confluent schema registry
client."""
