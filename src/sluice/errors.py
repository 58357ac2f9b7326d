"""The one error hierarchy: `SqlError` and its SQLSTATE-coded leaves, plus `format_error`.

Every failure a user can cause surfaces as a `SqlError`; third-party exceptions (Lark,
sqlglot, Spark, Kafka) are translated into one of these at the boundary where they arise.
Errors that are data — a source's decode and envelope errors, evaluation errors — carry
SQLSTATEs too: an errs row's `code` is the one a query reading it fails with
(`collection_error`), one vocabulary for rows and raised errors.
"""

from __future__ import annotations

import errno
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Span:
    """Half-open character range `[start, end)` into the text a statement was parsed from."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"bad span [{self.start}, {self.end})")

    def shift(self, offset: int) -> Span:
        return Span(self.start + offset, self.end + offset)

    def cover(self, other: Span) -> Span:
        return Span(min(self.start, other.start), max(self.end, other.end))


class SqlError(Exception):
    """Root of every error sluice reports to a user. Leaves set `code` (SQLSTATE)."""

    code = "XX000"

    def __init__(
        self,
        message: str,
        *,
        span: Span | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.detail = detail
        self.hint = hint

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, span={self.span!r})"


class ParseError(SqlError):
    """The text is not a statement of the dialect."""

    code = "42601"


class FeatureNotSupported(SqlError):
    """Valid SQL that sluice does not (yet) implement."""

    code = "0A000"


_LONG_LINE = 80  # lines longer than this are shown as a window around the caret, as psql does
_CONTEXT = 36


def format_error(err: SqlError, text: str | None = None) -> str:
    """Render `err` the way psql does: `ERROR:  msg`, the line with a caret, DETAIL, HINT."""
    lines = [f"ERROR:  {err.message}"]
    if text is not None and err.span is not None and err.span.start <= len(text):
        lines.extend(_caret_lines(text, err.span.start))
    if err.detail:
        lines.append(f"DETAIL:  {err.detail}")
    if err.hint:
        lines.append(f"HINT:  {err.hint}")
    return "\n".join(lines)


def _caret_lines(text: str, pos: int) -> list[str]:
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    if line_end == -1:
        line_end = len(text)
    line_no = text.count("\n", 0, pos) + 1
    source = text[line_start:line_end].expandtabs(1)
    col = pos - line_start
    if len(source) <= _LONG_LINE:
        window_start, window_end = 0, len(source)
    else:
        window_start = max(0, col - _CONTEXT)
        window_end = min(len(source), col + _CONTEXT)
    shown = source[window_start:window_end]
    if window_start > 0:
        shown = "..." + shown
        col = col - window_start + 3
    if window_end < len(source):
        shown = shown + "..."
    prefix = f"LINE {line_no}: "
    return [prefix + shown, " " * (len(prefix) + col) + "^"]


class UndefinedObject(SqlError):
    code = "42704"


class DuplicateObject(SqlError):
    code = "42710"


class UndefinedColumn(SqlError):
    code = "42703"


class AmbiguousColumn(SqlError):
    code = "42702"


class DuplicateColumn(SqlError):
    code = "42701"


class WrongObjectType(SqlError):
    code = "42809"


class TooManyExpressions(SqlError):
    """An INSERT's rows are wider than its target columns (PostgreSQL's syntax_error)."""

    code = "42601"


class DatatypeMismatch(SqlError):
    """An expression's type is not one the place it is used in takes."""

    code = "42804"


class InvalidParameterValue(SqlError):
    code = "22023"


class InvalidSchema(SqlError):
    """A format's schema (Avro, registry subject) cannot describe the source's columns."""

    code = "42P17"


class DependentObjectsStillExist(SqlError):
    code = "2BP01"


class ObjectInUse(SqlError):
    """Another session holds what this one needs (a data directory)."""

    code = "55006"


class DataLocationMismatch(SqlError):
    """A data directory is opened with a data URI other than where it keeps its data."""

    code = "55000"


class CatalogCorrupt(SqlError):
    """The durable catalog cannot be read; it is left untouched."""

    code = "XX001"


class StoreDamaged(SqlError):
    """A continuously ingested source's stored data is damaged and cannot be re-read from
    Kafka now, or a sink's delivered state is; the store is left untouched."""

    code = "XX001"


class CardinalityViolation(SqlError):
    """A subquery used as an expression returned more than one row."""

    code = "21000"


class DataException(SqlError):
    """A value is not data of its type or format: the SQLSTATE of a message that does not
    decode (`Decode error: …`), and the class of the evaluation errors below."""

    code = "22000"


class NullValueNotAllowed(DataException):
    """A Kafka message lacks the key or value its envelope needs (`Envelope error: Flat:
    Value not present…`, `Envelope error: Upsert: Null key…`)."""

    code = "22004"


class NumericValueOutOfRange(DataException):
    code = "22003"


class DivisionByZero(DataException):
    code = "22012"


class InvalidTextRepresentation(DataException):
    code = "22P02"


class NotNullViolation(SqlError):
    code = "23502"


class UniqueViolation(SqlError):
    """A sink's KEY holds two rows of its relation (Materialize's upsert key violation)."""

    code = "23505"


class QueryCanceled(SqlError):
    """A statement gave up waiting (PostgreSQL's statement timeout)."""

    code = "57014"


class ProtocolViolation(SqlError):
    """A client broke PostgreSQL's wire protocol (malformed, truncated or oversized
    messages); the server ends that connection."""

    code = "08P01"


class TooManyConnections(SqlError):
    code = "53300"


class ActiveSqlTransaction(SqlError):
    """A statement that cannot run inside a transaction block."""

    code = "25001"


class ReadOnlySqlTransaction(SqlError):
    """A write inside a transaction that has read (Materialize's read transactions)."""

    code = "25006"


class InFailedSqlTransaction(SqlError):
    code = "25P02"


class BindMismatch(SqlError):
    """A well-formed Bind that does not fit its statement: an error, not the end of the
    connection (as in PostgreSQL)."""

    code = "08P01"


class NoActiveSqlTransaction(SqlError):
    """A statement that needs a transaction block outside one (DECLARE CURSOR)."""

    code = "25P01"


class UndefinedPreparedStatement(SqlError):
    """A prepared statement a client names that it never prepared."""

    code = "26000"


class UndefinedCursor(SqlError):
    """A portal or cursor a client names that does not exist."""

    code = "34000"


class DuplicatePreparedStatement(SqlError):
    """A prepared statement prepared again under its name."""

    code = "42P05"


class DuplicateCursor(SqlError):
    """A portal or cursor declared again under its name."""

    code = "42P03"


class UndefinedParameter(SqlError):
    """A `$n` beyond the parameters a statement was given."""

    code = "42P02"


class InvalidTimeout(SqlError):
    """A FETCH timeout that is no interval."""

    code = "22007"


class CantChangeRuntimeParam(SqlError):
    """A SET of a setting the session cannot change."""

    code = "55P02"


class ExternalSystemError(SqlError):
    """A system sluice talks to (schema registry, Kafka) failed or refused."""

    code = "58000"


class ExternalSystemUnavailable(ExternalSystemError):
    """An external system could not answer now (unreachable, timed out, overloaded): a
    fault that may clear by itself, which a source retries up to its RETRY TIMEOUT."""


class DiskFull(SqlError):
    """A write found no space left on its filesystem: a table's, the catalog's, a source's
    store, a sink's state (PostgreSQL's disk_full, in its words). Nothing written before
    is lost, and the write succeeds again once there is space."""

    code = "53100"

    def __init__(self, path: str) -> None:
        super().__init__(disk_full_text(path), hint="Check free disk space.")


NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"
# PostgreSQL's words for a write that found no space (fd.c), and the same fault as Python
# and Java tell it naming the file (an OSError; a FileNotFoundException of an open for
# writing): the file is in one of the groups.
_DISK_FULL = re.compile(
    rf'could not write to file "([^"]*)": {NO_SPACE}|{NO_SPACE}: \'([^\']*)\'|(/\S*) \({NO_SPACE}\)'
)


def disk_full_text(path: str) -> str:
    return f'could not write to file "{path}": {NO_SPACE}'


def disk_full_in(text: str, where: str) -> str | None:
    """The disk-full text (`disk_full_text`) of a failure whose `text` — a Python or Java
    error's, possibly wrapped by Spark — says a write found no space: naming the file it
    names, else `where` (the folder being written); None for another failure. Beside
    `disk_full_text`, whose words it reads back too (a `DiskFull` raised inside a Spark
    job); read through `spark.failures.failure_reason`."""
    if NO_SPACE not in text:
        return None
    named = _DISK_FULL.search(text)
    return disk_full_text(next(filter(None, named.groups()), where) if named else where)


SOURCE_ERROR = "Source error: "


class SourceFailed(ExternalSystemError):
    """A source cannot be read: a fault outlasted its RETRY TIMEOUT, or its ingestion
    stopped on an error (and is restarted, with backoff, until the fault clears), or it
    saw more errors than its ERROR TOLERANCE or its topic's offsets went backwards (for
    good: `recovers` is false, and `hint` says what to do, if anything)."""

    def __init__(self, source: str, reason: str, *, recovers: bool = True, hint: str | None = None) -> None:
        reason = reason.removeprefix(SOURCE_ERROR)  # a reason that is itself a source error
        super().__init__(
            f'{SOURCE_ERROR}source "{source}" has failed: {reason}',
            hint="the source recovers by itself once the fault clears" if recovers else hint,
        )
        self.source = source
        self.reason = reason
        self.recovers = recovers
        if _DISK_FULL.fullmatch(reason):  # its store's filesystem is full: PostgreSQL's code
            self.code = DiskFull.code


class StatementTooComplex(SqlError):
    """A statement nested more deeply than sluice can take (PostgreSQL's 54001, whose
    message this keeps)."""

    code = "54001"

    def __init__(self, detail: str, *, span: Span | None = None) -> None:
        super().__init__("stack depth limit exceeded", span=span, detail=detail)


class OutOfMemory(SqlError):
    code = "53200"


class CharacterNotInRepertoire(SqlError):
    """Input that is not UTF-8 text."""

    code = "22021"


class InternalError(SqlError):
    """A failure that is a bug in sluice, not the user's: DETAIL names what went wrong."""

    code = "XX000"

    @classmethod
    def bug(cls, detail: str) -> InternalError:
        return cls("internal error", detail=detail, hint="this is a bug in sluice; please report it")


class SparkQueryFailed(SqlError):
    """Spark refused or failed a query sluice let through; a bug or a gap to report (not
    an `InternalError`: the statement failed, sluice did not crash)."""

    code = "XX000"


# The SQLSTATEs of errs rows (a source's `code`, a dead-letter table's `error_code`): the
# code a query reading the error fails with, so `FROM ONLY ERRORS` shows what a query says.
DECODE_ERROR = DataException.code
MISSING_KEY_OR_VALUE = NullValueNotAllowed.code
OFFSETS_LOST = ExternalSystemError.code
_COLLECTION_ERRORS = {leaf.code: leaf for leaf in (DataException, NullValueNotAllowed, ExternalSystemError)}

EVALUATION_ERROR = "Evaluation error: "
# An evaluation error's words (after EVALUATION_ERROR), PostgreSQL's, and its leaf; the
# first whose pattern matches them whole.
_EVALUATION_ERRORS = (
    (re.compile("division by zero"), DivisionByZero),
    (re.compile("invalid input syntax for type .*", re.DOTALL), InvalidTextRepresentation),
    (re.compile("more than one row returned by a subquery used as an expression"), CardinalityViolation),
    (re.compile(".*out of range.*", re.DOTALL), NumericValueOutOfRange),
)


def collection_error(message: str, code: str | None) -> SqlError:
    """The error of a query that read a collection holding an error: `message` as it is,
    as the leaf of its errs row's `code`, or — an evaluation error, which has no row —
    the leaf of PostgreSQL's error its words name (`DataException` for words not listed)."""
    if code is not None:
        # A store ingested by an older sluice may hold codes of its own: still this message.
        return _COLLECTION_ERRORS.get(code, DataException)(message)
    words = message.removeprefix(EVALUATION_ERROR)
    leaf = next((leaf for pattern, leaf in _EVALUATION_ERRORS if pattern.fullmatch(words)), DataException)
    return leaf(message)


# What crosses an entry point as it is: errors already told in SQL terms and
# interruptions (Ctrl-C, exit); from an iterator's `__next__`, the end of the iteration
# too. Anywhere else a StopIteration is a bug (a `next` that found nothing), which would
# silently end a caller's loop: it becomes an internal error like any other.
_PASSED = (SqlError, KeyboardInterrupt, SystemExit, GeneratorExit)


def as_sql_error(error: BaseException) -> SqlError:
    """`error` as the SqlError a user sees: itself if it is one; a statement too deep for
    the interpreter's stack (54001); input that is not UTF-8 (22021, PostgreSQL's text);
    memory exhausted (53200); a write that found its disk full (53100); else an internal
    error (XX000)."""
    if isinstance(error, SqlError):
        return error
    if isinstance(error, RecursionError):
        return StatementTooComplex("the statement nests expressions too deeply")
    if isinstance(error, UnicodeDecodeError):
        byte = error.object[error.start : error.start + 1].hex()
        return CharacterNotInRepertoire(f'invalid byte sequence for encoding "UTF8": 0x{byte}')
    if isinstance(error, MemoryError):
        return OutOfMemory("out of memory", detail="the statement needed more memory than there is")
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return DiskFull(str(error.filename or ""))
    first_line = next(iter(str(error).strip().splitlines()), "")
    named = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
    return InternalError.bug(named)


def user_errors(function: Callable[..., T]) -> Callable[..., T]:
    """Make `function` an entry point: whatever it raises reaches its caller as a
    `SqlError` (`as_sql_error`); an interruption, and an iterator's end from `__next__`,
    pass as they are."""
    passed = (*_PASSED, StopIteration) if function.__name__ == "__next__" else _PASSED

    @functools.wraps(function)
    def entry_point(*args, **kwargs) -> T:
        try:
            return function(*args, **kwargs)
        except passed:
            raise
        except BaseException as e:
            raise as_sql_error(e) from e

    return entry_point
