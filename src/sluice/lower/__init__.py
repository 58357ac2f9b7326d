"""Lowering: pure sqlglot → sqlglot rewrites between the planner and the renderer, one rule
per module as in sqlglot's optimizer — evaluation errors turned into rows, PostgreSQL
semantics Spark lacks, jsonb on Spark's VARIANT. `lowering` lists the rules in order and
is the entry the renderer calls; nothing here imports pyspark."""

from sluice.lower.errors_queries import MESSAGE
from sluice.lower.fusion import Fusion
from sluice.lower.lowering import RULES, Lowered, lower, spark_sql

__all__ = ["MESSAGE", "RULES", "Fusion", "Lowered", "lower", "spark_sql"]
