"""Lowering: pure sqlglot → sqlglot rewrites between the planner and the renderer — the
checks that turn evaluation errors into rows, PostgreSQL semantics on Spark, jsonb."""
