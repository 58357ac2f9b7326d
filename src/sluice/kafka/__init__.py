"""Talking to Kafka's world: the Confluent schema registry today; the broker reader next."""
