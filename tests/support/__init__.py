"""What tests and the benchmarks in bench/ share: scenarios (faults, sinks, poison
messages, hostile inputs, access), the services they run (a schema registry, a SASL
broker), the child processes they kill, the UPSERT reference model, and driving the REPL
in a terminal. A bench script puts the repository on `sys.path` and imports `tests.support`."""
