"""The sqllogictest runner behind `sluice test PATH…` (DESIGN.md §7).

This module owns the sqllogictest file format as sluice speaks it: parsing `.slt` and
`.test` files into records (`parse`), running them (`run_file`, `run_paths`) against a
fresh `Session` and a fresh `EmbeddedKafka` per file, the Kafka directives
(`kafka-create-topic`, `kafka-schema`, `kafka-ingest`, and `kafka-verify` from
`kafka_verify`), result comparison (sorting,
hashing, `mode standard|cockroach`, `hash-threshold`), failure reports, and `--rewrite`,
which rewrites expected results in place and leaves every other byte of the file alone.
How a value prints is `sluice.values.slt_value`, shared with the REPL.

Records are separated by blank lines; lines starting with `#` are comments wherever they
are (so a result value or a Kafka message cannot start with `#`: write `\\x23` in a
message). The format is SQLite's, which is why its corpus reads unmodified (a third
word after `query`'s types is a label: queries with one label must agree), plus
Materialize's and CockroachDB's extensions: `statement count N`, `query … colnames`,
`mode cockroach` (one row per line, values separated by a space), `… error pgcode XXXXX
<regex>` (the error's SQLSTATE too). `--rewrite` replaces
a failing query's result lines (comments among them go too) and a failing
`statement count`'s number, nothing else.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sluice.cli import kafka_verify
from sluice.errors import InternalError, SqlError, as_sql_error, format_error
from sluice.kafka.encode import encode_value, keyed_message
from sluice.values import slt_value

ENGINE = "postgresql"  # what `skipif` / `onlyif` call sluice
EXTENSIONS = (".slt", ".test")
KAFKA_ADDR = "${kafka-addr}"
SORT_MODES = ("nosort", "rowsort", "valuesort")
MODES = ("standard", "cockroach")
_HASH_LINE = re.compile(r"(\d+) values hashing to ([0-9a-f]{32})")
_TYPES = re.compile(r"[A-Za-z]+")
_REPORT_LINES = 40  # a diff longer than this is cut

_KAFKA_ARGS = {
    "kafka-create-topic": {"name", "partitions"},
    "kafka-schema": {"name"},
    "kafka-ingest": {
        "topic", "format", "schema", "key-format", "key-schema", "key-terminator",
        "partition", "timestamp", "confluent-wire-format", "headers",
    },
    "kafka-verify": kafka_verify.ARGS,
}
_FORMATS = ("bytes", "json", "avro")


# ---------------------------------------------------------------------------------------
# Parsing


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
    separator_index: int | None = None
    results_end: int | None = None  # one past the last result line

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
        elif word in _KAFKA_ARGS:
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
    record.separator_index = rest[separator][0]
    results = rest[separator + 1 :]
    record.expected = [text for _, text in results]
    record.results_end = (results[-1][0] if results else record.separator_index) + 1
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
        if not sep or name not in _KAFKA_ARGS[kind]:
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


# ---------------------------------------------------------------------------------------
# Running


class RecordFailed(Exception):
    """A record did not do what it expected; `args[0]` is the report's first line, `lines`
    the rest (SQL, diff)."""

    def __init__(self, summary: str, lines: Iterable[str] = ()) -> None:
        super().__init__(summary)
        self.lines = list(lines)


@dataclass
class FileResult:
    path: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0  # statements and queries not run: skipif/onlyif, after halt, sampled out
    reports: list[str] = field(default_factory=list)
    rewritten: bool = False
    seconds: float = 0.0

    @property
    def summary(self) -> str:
        return f"{self.path}: {self.passed} passed, {self.failed} failed"

    @property
    def report(self) -> str:
        """Every failure report, then the summary line."""
        return "\n".join(self.reports + [self.summary])


class FileRunner:
    """Runs the records of one file against `session` and `kafka` (fresh ones, normally:
    `run_file` makes them). `every=n` samples the file: every statement runs (later
    queries depend on them), but only the 1st, (n+1)th, (2n+1)th… query."""

    def __init__(self, path: str, text: str, session: Any, kafka: Any, *, rewrite: bool = False,
                 out: TextIO | None = None, every: int = 1) -> None:
        self.path = path
        self.every = every
        self.text = text
        self.session = session
        self.kafka = kafka
        self.bootstrap: str = kafka.bootstrap
        self.rewrite = rewrite
        self.out = out
        self.mode = "standard"
        self.hash_threshold = 0
        self.schemas: dict[str, tuple[int, Any]] = {}  # name → (schema id, parsed schema)
        self.labels: dict[str, tuple[str, int]] = {}  # label → (hash line, line it came from)
        self.edits: list[tuple[int, int, list[str]]] = []  # (start, end, new lines)
        self.result = FileResult(path)

    def run(self) -> FileResult:
        started = time.monotonic()
        records = parse(self.text)
        queries = 0
        for index, record in enumerate(records):
            sampled_out = False
            if record.kind == "query":
                sampled_out = queries % self.every != 0
                queries += 1
            if sampled_out or self._skipped(record):
                self.result.skipped += record.kind in ("statement", "query")
                continue
            if record.kind == "halt":
                self.result.skipped += sum(r.kind in ("statement", "query") for r in records[index:])
                break
            if record.kind == "mode":
                self.mode = record.value
                continue
            if record.kind == "hash-threshold":
                self.hash_threshold = int(record.value)
                continue
            try:
                self._run(record)
            except RecordFailed as failure:
                self._fail(record, str(failure), failure.lines)
            except Exception as e:  # reported, and the file goes on
                self._fail(record, *self._failure(record, e))
            else:
                self.result.passed += 1
        if self.rewrite and self.edits:
            self.result.rewritten = True
        self.result.seconds = time.monotonic() - started
        return self.result

    def rewritten_text(self) -> str:
        """The file with every rewritten expectation in place."""
        lines = self.text.split("\n")
        crlf = lines[0].endswith("\r")
        for start, end, new in sorted(self.edits, reverse=True):
            lines[start:end] = [n + "\r" if crlf else n for n in new]
        return "\n".join(lines)

    # -- records --------------------------------------------------------------------

    def _skipped(self, record: Record) -> bool:
        for condition, engine in record.conditions:
            if (condition == "skipif") == (engine == ENGINE):
                return True
        return False

    def _fail(self, record: Record, summary: str, lines: Iterable[str]) -> None:
        self.result.failed += 1
        report = "\n".join([f"{self.path}:{record.line}: {summary}", *lines])
        self.result.reports.append(report)
        if self.out is not None:
            print(report, file=self.out, flush=True)

    def _run(self, record: Record) -> None:
        if record.kind == "invalid":
            raise RecordFailed(f"cannot parse record: {record.problem}", [f"    {record.header}"])
        if record.kind == "statement":
            self._statement(record)
        elif record.kind == "query":
            self._query(record)
        elif record.kind == "kafka-create-topic":
            self.kafka.create_topic(record.args["name"], int(record.args.get("partitions", "1")))
        elif record.kind == "kafka-schema":
            self._schema(record)
        elif record.kind == "kafka-ingest":
            self._ingest(record)
        elif record.kind == "kafka-verify":
            self._verify(record)
        else:  # pragma: no cover - parse makes no other kinds
            raise RecordFailed(f"unknown record kind {record.kind}")

    def _failure(self, record: Record, error: Exception) -> tuple[str, list[str]]:
        """What a record that raised is reported as: a Kafka directive the broker refused,
        or a crash — an internal error of sluice, or a bug here — with where it happened."""
        reported = as_sql_error(error)
        if not isinstance(reported, InternalError):
            return f"{record.kind} failed: {reported.message}", [f"    {record.header}"]
        original = error.__cause__ if isinstance(error, InternalError) and error.__cause__ else error
        where = traceback.extract_tb(original.__traceback__)[-1]
        return (
            f"crashed: {reported.detail}",
            self._sql_lines(record) + [f"  at {where.filename}:{where.lineno} in {where.name}"],
        )

    def _sql(self, record: Record) -> str:
        return record.sql.replace(KAFKA_ADDR, self.bootstrap)

    def _sql_lines(self, record: Record) -> list[str]:
        if not record.sql:
            return [f"    {record.header}"]
        return ["    " + line for line in record.sql.split("\n")]

    def _execute(self, record: Record, *, one: bool) -> tuple[Any, SqlError | None]:
        """(result, None) or (None, the SqlError); an internal error propagates (a crash,
        which no expected error may match)."""
        sql = self._sql(record)
        try:
            if one:
                return self.session.execute(sql), None
            results = self.session.execute_script(sql)
            return (results[-1] if results else None), None
        except InternalError:
            raise
        except SqlError as e:
            return None, e

    def _error_text(self, record: Record, error: SqlError) -> list[str]:
        text = format_error(error, self._sql(record)).replace(self.bootstrap, KAFKA_ADDR)
        return ["  error:"] + ["    " + line for line in text.split("\n")]

    def _expect_error(self, record: Record, result: Any, error: SqlError | None) -> None:
        pattern = record.pattern
        if error is None:
            wanted = "an error" if pattern is None else f"an error matching {pattern}"
            raise RecordFailed(
                f"expected {wanted}, but the statement succeeded", self._sql_lines(record)
            )
        if record.sqlstate is not None and error.code != record.sqlstate:
            raise RecordFailed(
                f"expected SQLSTATE {record.sqlstate}, got {error.code}",
                self._sql_lines(record) + self._error_text(record, error),
            )
        if pattern is None:
            return
        try:
            regex = re.compile(pattern.replace(KAFKA_ADDR, re.escape(self.bootstrap)))
        except re.error as e:
            raise RecordFailed(f"bad error regex {pattern!r}: {e}", self._sql_lines(record)) from None
        if not regex.search(error.message):
            raise RecordFailed(
                "the error does not match",
                self._sql_lines(record) + [f"  expected error matching: {pattern}"]
                + self._error_text(record, error),
            )

    def _statement(self, record: Record) -> None:
        result, error = self._execute(record, one=False)
        if record.expect == "error":
            self._expect_error(record, result, error)
            return
        if error is not None:
            raise RecordFailed(
                "statement failed", self._sql_lines(record) + self._error_text(record, error)
            )
        if record.expect == "count":
            actual = _affected(result)
            if actual != record.count:
                if self.rewrite:
                    header = re.sub(
                        r"(\bcount\s+)\d+", lambda m: m.group(1) + str(actual), record.header, count=1
                    )
                    self.edits.append((record.header_index, record.header_index + 1, [header]))
                    return
                raise RecordFailed(
                    f"expected statement count {record.count}, got {actual}", self._sql_lines(record)
                )

    def _query(self, record: Record) -> None:
        result, error = self._execute(record, one=True)  # a query is one statement
        if record.expect == "error":
            self._expect_error(record, result, error)
            return
        if error is not None:
            raise RecordFailed(
                "query failed", self._sql_lines(record) + self._error_text(record, error)
            )
        columns = tuple(result.columns)
        if len(record.types) != len(columns):
            raise RecordFailed(
                f"query has {len(record.types)} column types ({record.types}), "
                f"the result has {len(columns)} columns ({', '.join(columns)})",
                self._sql_lines(record),
            )
        values, lines = self._render(record, result.rows)
        digest = hashlib.md5("".join(v + "\n" for v in values).encode("utf-8", "surrogateescape"))
        hash_line = f"{len(values)} values hashing to {digest.hexdigest()}"
        expected = list(record.expected or [])
        actual: list[str] = []
        if record.colnames:
            actual.append(" ".join(c.replace(" ", "␠") for c in columns))
        body = expected[1:] if record.colnames else expected
        hashed = len(body) == 1 and _HASH_LINE.fullmatch(body[0]) is not None
        if hashed:  # compare in the form the file uses, whatever the threshold
            same = self._same(expected, actual + [hash_line])
        else:
            same = self._same(expected, actual + lines)
        if not same:
            # Shown and rewritten in the form the threshold asks for.
            if hashed or (self.hash_threshold and len(values) > self.hash_threshold):
                actual.append(hash_line)
            else:
                actual.extend(lines)
            if self.rewrite:
                self._rewrite_results(record, actual)
            else:
                raise RecordFailed(
                    "query result differs", self._sql_lines(record) + _diff(expected, actual)
                )
        if record.label is not None:
            earlier = self.labels.setdefault(record.label, (hash_line, record.line))
            if earlier[0] != hash_line:
                raise RecordFailed(
                    f"result differs from the earlier query labelled {record.label}"
                    f" (line {earlier[1]})",
                    self._sql_lines(record) + _diff([earlier[0]], [hash_line]),
                )

    def _render(self, record: Record, rows: list[tuple]) -> tuple[list[str], list[str]]:
        """(values in order, the result's lines in the current mode)."""
        width = len(record.types)
        table = [
            [self._value(value, record.types[i]) for i, value in enumerate(row)] for row in rows
        ]
        if record.sort == "rowsort":
            table.sort()
        values = [v for row in table for v in row]
        if record.sort == "valuesort":
            values.sort()
            table = [values[i : i + width] for i in range(0, len(values), width)] if width else []
        if self.mode == "cockroach":
            return values, [" ".join(row) for row in table]
        return values, values

    def _value(self, value: Any, letter: str) -> str:
        return slt_value(value, letter, self.mode).replace(self.bootstrap, KAFKA_ADDR)

    def _same(self, expected: list[str], actual: list[str]) -> bool:
        if self.mode == "cockroach":
            expected = [" ".join(line.split()) for line in expected]
            actual = [" ".join(line.split()) for line in actual]
        return expected == actual

    def _rewrite_results(self, record: Record, actual: list[str]) -> None:
        if record.separator_index is not None:
            self.edits.append((record.separator_index + 1, record.results_end, actual))
        elif actual:
            at = record.last_sql_index + 1
            self.edits.append((at, at, ["----", *actual]))

    # -- kafka --------------------------------------------------------------------------

    def _schema(self, record: Record) -> None:
        import fastavro

        name = record.args["name"]
        text = "\n".join(line for _, line in record.body)
        try:
            parsed = fastavro.parse_schema(json.loads(text))
        except Exception as e:
            raise RecordFailed(f"kafka-schema {name}: not an Avro schema: {e}") from None
        schema_id = self.schemas[name][0] if name in self.schemas else len(self.schemas) + 1
        self.schemas[name] = (schema_id, parsed)

    def _ingest(self, record: Record) -> None:
        from sluice.kafka.embedded import produce

        args = record.args
        messages = self._listed(record)
        produce(
            self.bootstrap,
            args["topic"],
            [(m.key, m.value, list(m.headers)) for m in messages],
            partition=int(args["partition"]) if "partition" in args else None,
            timestamp_ms=int(args["timestamp"]) if "timestamp" in args else None,
        )

    def _verify(self, record: Record) -> None:
        from sluice.kafka.consume import read_committed

        args = record.args
        expected = self._listed(record)
        timeout = float(args.get("timeout", kafka_verify.DEFAULT_TIMEOUT))
        got = read_committed(self.bootstrap, args["topic"], len(expected), timeout)
        report = kafka_verify.compare(args, expected, got, self.schemas)
        if report is not None:
            raise RecordFailed(f"kafka-verify topic={args['topic']}: the topic's messages differ", report)

    def _listed(self, record: Record) -> list[kafka_verify.Message]:
        """The messages a `kafka-ingest` or `kafka-verify` record lists."""
        args = record.args
        try:
            return kafka_verify.listed_messages(args, record.body, lambda line: self._message(args, line))
        except kafka_verify.BadLine as e:
            raise RecordFailed(f"{record.kind}: {e}", [f"    {e.line}"]) from None

    def _message(self, args: dict[str, str], line: str) -> tuple[bytes | None, bytes | None]:
        def value(text: str) -> bytes:
            return self._encode(text, args.get("format", "bytes"), args.get("schema"), args)

        key_format = args.get("key-format")
        if key_format is None:
            return None, value(line)
        if key_format == "bytes":
            return keyed_message(line, args.get("key-terminator", ":"), value)
        try:
            _, end = json.JSONDecoder().raw_decode(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"the key is not JSON: {e}") from None
        key_text, rest = line[:end], line[end:]
        if rest and not rest.startswith(" "):
            raise ValueError("expected a space between the key and the value")
        value_text = rest[1:]
        key = self._encode(key_text, key_format, args.get("key-schema"), args)
        return key, value(value_text) if value_text else None

    def _encode(self, text: str, fmt: str, schema: str | None, args: dict[str, str]) -> bytes:
        if fmt != "avro":
            return encode_value(text)
        if schema not in self.schemas:
            raise ValueError(f"no kafka-schema named {schema!r}")
        schema_id, parsed = self.schemas[schema]
        framed = args.get("confluent-wire-format", "true") == "true"
        return encode_value(text, parsed, schema_id if framed else None, schema_name=f"schema {schema}")


def _affected(result: Any) -> int:
    """The row count a statement reports: `INSERT 0 3` → 3; otherwise its rows."""
    if result is None:
        return 0
    match = re.search(r"\s(\d+)$", result.status or "")
    return int(match.group(1)) if match else len(result.rows)


def _diff(expected: list[str], actual: list[str]) -> list[str]:
    lines = list(difflib.unified_diff(expected, actual, "expected", "actual", lineterm="", n=2))
    if len(lines) > _REPORT_LINES:
        lines = lines[:_REPORT_LINES] + [f"... ({len(lines) - _REPORT_LINES} more diff lines)"]
    return ["  " + line for line in lines]


# ---------------------------------------------------------------------------------------
# Files and paths


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files named, directories expanded to their `.slt`/`.test` files (recursively,
    sorted). Raises FileNotFoundError for a path that does not exist."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found.extend(sorted(
                (p for p in path.rglob("*") if p.suffix in EXTENSIONS and p.is_file()),
                key=lambda p: p.as_posix(),
            ))
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(str(path))
    return found


def run_file(path: str | Path, *, rewrite: bool = False, out: TextIO | None = None,
             display: str | None = None, every: int = 1) -> FileResult:
    """Run one file against a fresh session (temporary data directory) and a fresh
    embedded Kafka broker; with `rewrite`, write corrected expectations back. Reports
    name the file as `display` (default: `path` as given); `every` samples its queries
    (`FileRunner`)."""
    import sluice
    from sluice.kafka.embedded import EmbeddedKafka

    path = Path(path)
    display = str(path) if display is None else display
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        runner = FileRunner(display, text, session, kafka, rewrite=rewrite, out=out, every=every)
        result = runner.run()
    if result.rewritten:
        new = runner.rewritten_text()
        if new != text:
            path.write_bytes(new.encode("utf-8", "surrogateescape"))
            if out is not None:
                print(f"{display}: rewritten", file=out, flush=True)
    return result


def run_paths(paths: Iterable[str | Path], *, rewrite: bool = False, out: TextIO | None = None) -> int:
    """`sluice test`: run every file, print failure reports as they happen, then one
    summary line per file and `N passed, N failed`. Exit status 1 on any failure."""
    out = out if out is not None else sys.stdout
    try:
        files = find_files(paths)
    except FileNotFoundError as e:
        print(f"sluice: no such file or directory: {e}", file=sys.stderr)
        return 2
    results = [run_file(path, rewrite=rewrite, out=out) for path in files]
    for result in results:
        print(result.summary, file=out)
    passed = sum(r.passed for r in results)
    failed = sum(r.failed for r in results)
    print(f"{passed} passed, {failed} failed", file=out, flush=True)
    return 1 if failed else 0
