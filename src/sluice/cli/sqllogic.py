"""The sqllogictest runner behind `sluice test PATH…` (DESIGN.md §7).

This module runs files of records (`sqllogic_format`): `run_file` and `run_paths`, each
file against a fresh `Session` and a fresh `EmbeddedKafka` (its Kafka directives run by
`sqllogic_kafka`); result comparison (sorting, hashing, `mode standard|cockroach`,
`hash-threshold`, labels), failure reports, and `--rewrite`, which rewrites expected
results in place and leaves every other byte of the file alone: it replaces a failing
query's result lines (comments among them go too) and a failing `statement count`'s
number, nothing else. How a value prints is `sluice.values.slt_value`, shared with the REPL.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sluice.cli.sqllogic_format import KAFKA_ARGS, Record, RecordFailed, parse
from sluice.cli.sqllogic_kafka import KafkaDirectives
from sluice.errors import InternalError, SqlError, as_sql_error, format_error
from sluice.values import slt_value

ENGINE = "postgresql"  # what `skipif` / `onlyif` call sluice
EXTENSIONS = (".slt", ".test")
KAFKA_ADDR = "${kafka-addr}"
_HASH_LINE = re.compile(r"(\d+) values hashing to ([0-9a-f]{32})")
_REPORT_LINES = 40  # a diff longer than this is cut


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
        self.bootstrap: str = kafka.bootstrap
        self.rewrite = rewrite
        self.out = out
        self.mode = "standard"
        self.hash_threshold = 0
        self.kafka_directives = KafkaDirectives(kafka)
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
        elif record.kind in KAFKA_ARGS:
            self.kafka_directives.run(record)
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
        if record.results_span is not None:
            separator_index, results_end = record.results_span
            self.edits.append((separator_index + 1, results_end, actual))
        elif actual:
            at = record.last_sql_index + 1
            self.edits.append((at, at, ["----", *actual]))


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
