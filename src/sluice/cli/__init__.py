"""The `sluice` command (`main`): the REPL, `run`, `parse`, `plan`, `test`, `demo` and the
embedded Kafka broker; the sqllogic and conformance runners; psql-style output."""
