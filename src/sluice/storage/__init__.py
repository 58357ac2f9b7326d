"""What lives for the whole session: where the data is (`location`), tables, sources as
oks and errs, their continuous ingestion into committed stores and its compaction, the
sinks, and the `Controller` that owns every one of those long-running jobs."""
