"""Spark itself, as sluice uses it: the one Spark session and its settings, the renderer's
PySpark calls (`pyspark_code`, which EXPLAIN PYSPARK records: its expressions in
`pyspark_expr`, the recording's DataFrames in `pyspark_frame`, the program's lines in
`pyspark_layout`), the texts that carry failures across Spark, each written and read in
one module (`failures`: a Python exception's; `guards`: a query's guard's; `conditions`:
Spark's own), and the
`sluice_kafka` Python data source (`kafka_source`), which Spark's Python workers import on
their own: importing this package imports nothing else."""
