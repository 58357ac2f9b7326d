"""Kafka sinks: a job per sink writing its relation's changes to a topic, exactly once."""
