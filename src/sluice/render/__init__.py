"""One statement's work on Spark: a planned query rendered to DataFrames and run (`query`,
`executor`), table writes, a SUBSCRIBE's changes and EXPLAIN PYSPARK's program. What
lives for the whole session — ingestion, stores, sinks — is `storage`'s."""
