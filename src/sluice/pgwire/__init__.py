"""PostgreSQL's wire protocol over a `Session` (`sluice serve`, DESIGN.md §11): psql,
drivers and BI tools connect to sluice as they do to Materialize.

`protocol` owns the bytes (framing, bounded reads, the server's messages), `types` how
sluice's values travel (OIDs, text and binary formats, parameters), `statements` what a
connection reads in a statement's text before the dialect does (placeholders,
transaction control, session variables), `settings` the session variables, `connection`
one client's conversation (its startup, the simple and extended query protocols),
`statement_runner` what its statements do (the transaction block, session variables,
cursors — `cursor` — COPY, the dialect's statements, cancelling), `server` the listener
and what connections share.
"""
