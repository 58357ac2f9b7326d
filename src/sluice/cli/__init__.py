"""Command-line entry points: `sluice parse` today; the REPL, runners and embedded Kafka later."""
