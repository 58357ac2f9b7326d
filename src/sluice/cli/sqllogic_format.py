"""The sqllogictest file format as sluice speaks it (DESIGN.md §7): `parse` reads a `.slt`
or `.test` file's text into `Record`s, each with the positions `--rewrite` needs; a record
that cannot be understood is an `invalid` record, never an exception. `RecordFailed` is
what running a record raises when it did not do what it expected.

Records are separated by blank lines; lines starting with `#` are comments wherever they
are (so a result value or a Kafka message cannot start with `#`: write `\\x23` in a
message). The format is SQLite's, which is why its corpus reads unmodified (a third
word after `query`'s types is a label: queries with one label must agree), plus
Materialize's and CockroachDB's extensions: `statement count N`, `query … colnames`,
`mode cockroach` (one row per line, values separated by a space), `… error pgcode XXXXX
<regex>` (the error's SQLSTATE too), and sluice's Kafka directives (`kafka-create-topic`,
`kafka-schema`, `kafka-ingest`, `kafka-verify`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sluice.cli import kafka_verify

SORT_MODES = ("nosort", "rowsort", "valuesort")
MODES = ("standard", "cockroach")
_TYPES = re.compile(r"[A-Za-z]+")

# Each Kafka directive and the arguments its header takes.
KAFKA_ARGS = {
    "kafka-create-topic": {"name", "partitions"},
    "kafka-schema": {"name"},
    "kafka-ingest": {
        "topic", "format", "schema", "key-format", "key-schema", "key-terminator",
        "partition", "timestamp", "confluent-wire-format", "headers",
    },
    "kafka-verify": kafka_verify.ARGS,
}
_FORMATS = ("bytes", "json", "avro")


@dataclass
class Record:
    """One record of a file. `line` is the 1-based line of its header; indexes (`*_index`)
    are 0-based positions in the file's lines, for `--rewrite`."""

    kind: str  # statement | query | halt | mode | hash-threshold | kafka-… | invalid
    line: int
    header: str
    conditions: list[tuple[str, str]] = field(default_factory=list)
    # statement / query
    expect: str = "ok"  # statement: ok | error | count; query: rows | error
    pattern: str | None = None  # the error regex; None: any error
    sqlstate: str | None = None  # the error's SQLSTATE (`error pgcode XXXXX …`); None: any
    count: int | None = None
    sql: str = ""
    types: str = ""
    sort: str = "nosort"
    colnames: bool = False
    label: str | None = None
    expected: list[str] | None = None  # result lines; None when there is no `----`
    # halt / mode / hash-threshold
    value: str = ""
    # kafka directives
    args: dict[str, str] = field(default_factory=dict)
    body: list[tuple[int, str]] = field(default_factory=list)  # (line, text)
    # why an invalid record is invalid
    problem: str = ""
    # positions for --rewrite
    header_index: int = 0
    last_sql_index: int = 0
    results_span: tuple[int, int] | None = None  # the `----` line, one past the last result line

    @property
    def name(self) -> str:
        """The kind with its expectation: `statement ok`, `statement count`, `query`,
        `query error`, `halt`, `kafka-ingest`…"""
        if self.kind == "statement" or (self.kind == "query" and self.expect == "error"):
            return f"{self.kind} {self.expect}"
        return self.kind


def parse(text: str) -> list[Record]:
    """Every record of a file's text, in order. A record that cannot be understood becomes
    an `invalid` record (reported as a failure when run), never an exception."""
    lines = text.split("\n")
    records: list[Record] = []
    group: list[tuple[int, str]] = []
    for index, raw in enumerate(lines + [""]):
        line = raw.removesuffix("\r")
        if line.strip() == "":
            if group:
                records.extend(_parse_group(group))
                group = []
        elif not line.startswith("#"):
            group.append((index, line))
    return records


def _words(line: str) -> list[str]:
    """The whitespace-separated words of a header line, up to a `#` comment."""
    words = line.split()
    for i, word in enumerate(words):
        if word.startswith("#"):
            return words[:i]
    return words


def _parse_group(group: list[tuple[int, str]]) -> Iterator[Record]:
    """The records of one blank-line-separated group: `skipif`/`onlyif` lines, then a
    header and its lines. `halt`, `mode` and `hash-threshold` are one line each, so a
    group may hold several of them before its last record."""
    conditions: list[tuple[str, str]] = []
    i = 0
    while i < len(group):
        index, line = group[i]
        words = _words(line)
        word = words[0] if words else ""
        record = Record(word, index + 1, line, conditions, header_index=index)
        if word in ("skipif", "onlyif"):
            if len(words) < 2:
                yield _invalid(record, f"{word} needs an engine name")
                return
            conditions.append((word, words[1]))
            i += 1
            continue
        if word in ("halt", "mode", "hash-threshold"):
            conditions = []
            i += 1
            if word == "mode" and (len(words) != 2 or words[1] not in MODES):
                yield _invalid(record, "expected mode standard or mode cockroach")
            elif word == "hash-threshold" and (len(words) != 2 or not words[1].isdigit()):
                yield _invalid(record, "expected hash-threshold N")
            elif word == "halt" and len(words) != 1:
                yield _invalid(record, "halt takes no arguments")
            else:
                record.value = words[1] if len(words) > 1 else ""
                yield record
            continue
        rest = group[i + 1 :]
        if word == "statement":
            yield _statement(line, words, index, rest, conditions)
        elif word == "query":
            yield _query(line, words, index, rest, conditions)
        elif word in KAFKA_ARGS:
            yield _kafka(line, words, index, rest, conditions)
        else:
            yield _invalid(record, f"unknown record type {word!r}")
        return


def _statement(line: str, words: list[str], index: int, rest, conditions) -> Record:
    record = Record("statement", index + 1, line, conditions, header_index=index)
    mode = words[1] if len(words) > 1 else ""
    if mode == "ok" and len(words) == 2:
        record.expect = "ok"
    elif mode == "error":
        _expected_error(record, line)
    elif mode == "count" and len(words) == 3 and words[2].isdigit():
        record.expect, record.count = "count", int(words[2])
    else:
        return _invalid(record, "expected statement ok, statement error <regex> or statement count N")
    if any(text == "----" for _, text in rest):
        return _invalid(record, "a statement has no results (`----`): use query")
    return _sql(record, rest)


def _expected_error(record: Record, line: str) -> None:
    """`… error [pgcode XXXXX] [regex]`."""
    record.expect = "error"
    pattern = line.split("error", 1)[1].strip()
    if (pgcode := _PGCODE.match(pattern)) is not None:
        record.sqlstate = pgcode.group(1)
        pattern = pattern[pgcode.end() :]
    record.pattern = pattern or None


_PGCODE = re.compile(r"pgcode ([0-9A-Z]{5})(?:\s+|$)")


def _query(line: str, words: list[str], index: int, rest, conditions) -> Record:
    record = Record("query", index + 1, line, conditions, header_index=index)
    if len(words) < 2:
        return _invalid(record, "expected query <types> or query error <regex>")
    if words[1] == "error":
        _expected_error(record, line)
        if any(text == "----" for _, text in rest):
            return _invalid(record, "query error has no results (`----`)")
        return _sql(record, rest)
    record.expect = "rows"
    if not _TYPES.fullmatch(words[1]):
        return _invalid(record, f"bad column types {words[1]!r}: letters such as T, I, R")
    record.types = words[1].upper()
    for word in words[2:]:
        if word in SORT_MODES:
            record.sort = word
        elif word == "colnames":
            record.colnames = True
        elif record.label is None:
            record.label = word
        else:
            return _invalid(record, f"unexpected {word!r} after the query's types")
    separator = next((n for n, (_, text) in enumerate(rest) if text == "----"), None)
    if separator is None:
        return _sql(record, rest)
    separator_index = rest[separator][0]
    results = rest[separator + 1 :]
    record.expected = [text for _, text in results]
    record.results_span = (separator_index, (results[-1][0] if results else separator_index) + 1)
    return _sql(record, rest[:separator])


def _sql(record: Record, lines) -> Record:
    if not lines:
        return _invalid(record, "the record has no SQL")
    record.sql = "\n".join(text for _, text in lines)
    record.last_sql_index = lines[-1][0]
    return record


def _invalid(record: Record, problem: str) -> Record:
    record.kind, record.problem = "invalid", problem
    return record


def _kafka(line: str, words: list[str], index: int, rest, conditions) -> Record:
    kind = words[0]
    record = Record(kind, index + 1, line, conditions, header_index=index)
    record.body = [(n + 1, text) for n, text in rest]
    for word in words[1:]:
        name, sep, value = word.partition("=")
        if not sep or name not in KAFKA_ARGS[kind]:
            return _invalid(record, f"{kind} does not take {word!r}")
        if name in record.args:
            return _invalid(record, f"{name} given twice")
        record.args[name] = value
    args = record.args
    if kind in ("kafka-ingest", "kafka-verify"):
        if "topic" not in args:
            return _invalid(record, f"{kind} needs topic=T")
        for name in ("format", "key-format"):
            if args.get(name, "bytes") not in _FORMATS:
                return _invalid(record, f"{name} must be one of bytes, json, avro")
        if args.get("format") == "avro" and "schema" not in args:
            return _invalid(record, "format=avro needs schema=S")
        if args.get("key-format") == "avro" and "key-schema" not in args:
            return _invalid(record, "key-format=avro needs key-schema=S")
        for name in ("partition", "timestamp"):
            if name in args and not args[name].isdigit():
                return _invalid(record, f"{name} must be a non-negative integer")
        if args.get("confluent-wire-format", "true") not in ("true", "false"):
            return _invalid(record, "confluent-wire-format must be true or false")
        if "key-terminator" in args and not args["key-terminator"]:
            return _invalid(record, "key-terminator must not be empty")
        if kind == "kafka-verify" and (problem := kafka_verify.problem(args)):
            return _invalid(record, problem)
        if kind == "kafka-ingest" and args.get("headers", "true") != "true":
            return _invalid(record, "headers must be true (then indented name=value lines follow a message)")
    else:
        if not args.get("name"):
            return _invalid(record, f"{kind} needs name=…")
        if "partitions" in args and not (args["partitions"].isdigit() and int(args["partitions"]) > 0):
            return _invalid(record, "partitions must be a positive integer")
        if kind == "kafka-schema" and not rest:
            return _invalid(record, "kafka-schema needs the schema (JSON) on the following lines")
        if kind == "kafka-create-topic" and rest:
            return _invalid(record, "kafka-create-topic takes no lines after it")
    return record


class RecordFailed(Exception):
    """A record did not do what it expected; `args[0]` is the report's first line, `lines`
    the rest (SQL, diff)."""

    def __init__(self, summary: str, lines: Iterable[str] = ()) -> None:
        super().__init__(summary)
        self.lines = list(lines)

