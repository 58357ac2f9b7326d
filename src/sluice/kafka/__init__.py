"""Talking to Kafka's world: the embedded broker, metadata and retries (`client`, `retry`),
the `sluice_kafka` PySpark data source (`reader`), message decoding and encoding, and the
Confluent schema registry client."""
