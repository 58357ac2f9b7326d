"""Plans → PySpark. The only package (with the Kafka reader) that imports pyspark."""
