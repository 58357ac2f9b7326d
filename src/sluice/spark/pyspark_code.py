"""The renderer's PySpark calls as the Python that makes them: EXPLAIN PYSPARK's program.

The renderer reaches Spark's functions through `F` and `Window` here. They are
`pyspark.sql.functions` and `pyspark.sql.window.Window` — except while a `Recording` is
active, when they and the stand-in `spark` session a recording hands out return
expressions that write themselves as Python instead of building Spark objects. The same
rendering code runs either way, so the printed program is the one Spark runs; no JVM is
started for it.

A DataFrame of a recording knows its columns (and the types of those that come from the
Kafka reader's schema or a literal schema), because rendering looks at them. A DataFrame
used once is written inline where it is used; one used more often, or named, is bound
to a variable first.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import decimal
import inspect
import itertools
import json
import keyword
import re
import types
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import sqlglot
from pyspark.sql import functions as _functions
from pyspark.sql.types import DataType, StructField, StructType
from pyspark.sql.window import Window as _Window

from sluice.errors import SqlError
from sluice.spark.kafka_source import Options

_RAW = object()  # the target of a statement of raw lines
_RETURN = object()  # the target of a function's `return` statement
_SCHEMA = object()  # a reader's schema, among its options
_PLACEHOLDER = "\x00{}\x00"  # an expression's value in a message
_RECORDING: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("recording", default=None)

# Option names Spark's default `spark.redaction.regex` matches: their values are not shown.
_REDACTED = re.compile(r"(?i)secret|password|token|access[.]?key")

# DataFrame methods whose result is another DataFrame over the same columns.
_SAME_COLUMNS = frozenset(
    {"where", "filter", "limit", "observe", "orderBy", "sort", "distinct", "unionAll",
     "union", "unionByName", "alias", "hint", "repartition", "coalesce", "dropDuplicates"}
)
# DataFrame methods run for their effect: written as statements where they are called.
_EFFECTS = frozenset({"createOrReplaceTempView", "unpersist", "persist", "cache"})
# DataFrame methods that run a Spark job: their result is bound to a variable.
_ACTIONS = frozenset({"collect", "first", "count", "take", "toLocalIterator"})


class Unrecordable(Exception):
    """A call the recording cannot write as Python (what, in the exception's words)."""


class Expr:
    """A Python expression: a sequence of text and the DataFrames it refers to. `name` is
    the column name Spark gives it where one is evident (`F.col("x")`, `.alias("x")`)."""

    def __init__(self, parts: tuple, name: str | None = None) -> None:
        self.parts = parts
        self.name = name

    def __getattr__(self, attr: str) -> Expr:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Attribute(self.parts + (f".{attr}",), attr)

    def __getitem__(self, key) -> Expr:
        return Expr(self.parts + ("[",) + _parts(key) + ("]",))

    def __call__(self, *args, **kwargs) -> Expr:
        return Expr(self.parts + _arguments(args, kwargs))

    def __bool__(self) -> bool:
        raise TypeError("a recorded PySpark expression has no truth value")

    def __iter__(self) -> Iterator:
        raise TypeError("a recorded PySpark expression is not iterable")

    __hash__ = object.__hash__

    def __format__(self, spec: str) -> str:
        """In a message, a placeholder `fail_if` writes as the expression's value."""
        return _PLACEHOLDER.format("".join(p for p in self.parts if isinstance(p, str)))

    def _binary(self, operator: str, other, reflected: bool = False) -> Expr:
        left, right = (_parts(other), self.parts) if reflected else (self.parts, _parts(other))
        return Expr(("(",) + left + (f" {operator} ",) + right + (")",))

    def __and__(self, other): return self._binary("&", other)
    def __or__(self, other): return self._binary("|", other)
    def __eq__(self, other): return self._binary("==", other)  # type: ignore[override]
    def __ne__(self, other): return self._binary("!=", other)  # type: ignore[override]
    def __lt__(self, other): return self._binary("<", other)
    def __le__(self, other): return self._binary("<=", other)
    def __gt__(self, other): return self._binary(">", other)
    def __ge__(self, other): return self._binary(">=", other)
    def __add__(self, other): return self._binary("+", other)
    def __sub__(self, other): return self._binary("-", other)
    def __mul__(self, other): return self._binary("*", other)
    def __truediv__(self, other): return self._binary("/", other)
    def __radd__(self, other): return self._binary("+", other, True)
    def __rsub__(self, other): return self._binary("-", other, True)
    def __invert__(self): return Expr(("~",) + self.parts)
    def __neg__(self): return Expr(("-",) + self.parts)


class _Attribute(Expr):
    """`receiver.attr`, which names its result when called as `F.col(name)` or
    `column.alias(name)`."""

    def __init__(self, parts: tuple, attr: str) -> None:
        super().__init__(parts)
        self.attr = attr

    def __call__(self, *args, **kwargs) -> Expr:
        called = super().__call__(*args, **kwargs)
        if self.attr in ("col", "alias") and args and isinstance(args[0], str):
            called.name = args[0]
        return called


class Frame(Expr):
    """A DataFrame of a recording: how it is made (`parts`) and its columns, `fields`
    (name → Spark type, or None where rendering never needs it)."""

    def __init__(self, recording: Recording, parts: tuple, fields: dict[str, DataType | None]) -> None:
        super().__init__(parts)
        self.recording = recording
        self.fields = fields
        recording.frames.append(self)

    @property
    def columns(self) -> list[str]:
        return list(self.fields)

    @property
    def schema(self) -> _Schema:
        return _Schema(self)

    @property
    def write(self) -> Expr:
        return Expr((self, ".write"))

    @property
    def writeStream(self) -> Expr:
        return Expr((self, ".writeStream"))

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Method(self, attr)

    def __getitem__(self, key) -> Expr:
        return Expr((self,) + ("[",) + _parts(key) + ("]",), key if isinstance(key, str) else None)

    def derived(self, parts: tuple, fields: dict[str, DataType | None]) -> Frame:
        return Frame(self.recording, parts, fields)


class _Schema(Expr):
    """`frame.schema`: its fields; as an argument, the frame's schema. A type the recording
    does not know is written as the frame's own, `frame.schema["name"].dataType`."""

    def __init__(self, frame: Frame) -> None:
        super().__init__((frame, ".schema"))
        self.frame = frame

    def __getitem__(self, name: str) -> _Field:
        data_type = self.frame.fields[name]
        if data_type is None:
            data_type = Expr((self.frame, f'.schema["{name}"].dataType'))
        return _Field(name, data_type)

    def __iter__(self) -> Iterator:
        return (self[name] for name in self.frame.fields)

    @property
    def fields(self) -> list[_Field]:
        return list(self)


class _Field:
    """A field of `frame.schema`: its `name` and `dataType`."""

    def __init__(self, name: str, data_type) -> None:
        self.name = name
        self.dataType = data_type


class _Method:
    """`frame.method`, called: a new DataFrame, a statement, or a job's result."""

    def __init__(self, frame: Frame, method: str) -> None:
        self.frame = frame
        self.method = method

    def __call__(self, *args, **kwargs):
        frame, method = self.frame, self.method
        parts = (frame, f".{method}") + _arguments(args, kwargs)
        if method in _EFFECTS:
            frame.recording.statement(parts)
            return frame
        if method in _ACTIONS:
            return frame.recording.bind_result(parts, method)
        fields = dict(frame.fields)
        if method in _SAME_COLUMNS:
            return frame.derived(parts, fields)
        if method == "select":
            return frame.derived(parts, _selected(fields, args))
        if method == "withColumn":
            fields[args[0]] = _type_of(args[1], frame.fields)
            return frame.derived(parts, fields)
        if method == "withColumns":
            fields.update({name: _type_of(column, frame.fields) for name, column in args[0].items()})
            return frame.derived(parts, fields)
        if method == "drop":
            return frame.derived(parts, {n: t for n, t in fields.items() if n not in args})
        if method == "toDF":
            return frame.derived(parts, dict(zip(args, fields.values(), strict=True)))
        if method == "join":
            return frame.derived(parts, _joined(fields, *args, **kwargs))
        if method == "groupBy":
            return _Grouped(frame, parts, args)
        raise Unrecordable(f"DataFrame.{method}")


def _joined(fields: dict, other: Frame, on=None, how: str = "inner") -> dict:
    """The columns of a join: a semi or anti join's are its left side's; else the left
    side's, then those of the right side not joined on by name."""
    if how in ("left_anti", "leftanti", "anti", "left_semi", "leftsemi", "semi"):
        return fields
    using = [on] if isinstance(on, str) else list(on) if isinstance(on, (list, tuple)) else []
    return {**fields, **{n: t for n, t in other.fields.items() if n not in using}}


class _Grouped(Expr):
    """`frame.groupBy(…)`: what a grouped frame gives, of those calls rendering makes."""

    def __init__(self, frame: Frame, parts: tuple, keys: tuple) -> None:
        super().__init__(parts)
        self.frame = frame
        self.keys = keys

    def agg(self, *columns) -> Frame:
        parts = self.parts + _call("agg", columns, {})
        return self.frame.derived(parts, _selected(self.frame.fields, (*self.keys, *columns)))


def _selected(fields: dict, columns: tuple) -> dict:
    selected = {}
    for column in columns:
        if isinstance(column, str) and column.endswith("*"):
            selected.update(_star(fields, column))
        elif isinstance(column, str):
            selected[column] = fields[column]
        elif column.name is not None:
            selected[column.name] = _type_of(column, fields)
        else:  # named by Spark after the expression; rendering only counts such columns
            selected[f"<unnamed {len(selected)}>"] = None
    return selected


def _star(fields: dict, star: str) -> dict:
    """The columns of `*`, or of `struct.*` where the struct's type is known."""
    if star == "*":
        return fields
    struct = fields[star.removesuffix(".*")]
    if isinstance(struct, dict):  # a struct a recording describes by its fields
        return struct
    return {f.name: f.dataType for f in struct.fields}


def _type_of(column, fields: dict) -> DataType | None:
    """A column's type where rendering may ask for it: that of a column it only names."""
    if isinstance(column, Expr) and column.parts[:1] == ("F.col",) and column.name in fields:
        return fields[column.name]
    return None


class _Reader(Expr):
    """`spark.read` / `spark.readStream` with the options `given` so far."""

    def __init__(self, recording: Recording, parts: tuple, given: dict) -> None:
        super().__init__(parts)
        self.recording = recording
        self.given = given

    def format(self, name: str) -> _Reader:
        return self._with({}, _call("format", (name,), {}))

    def option(self, key: str, value) -> _Reader:
        return self._with({key: value}, _call("option", (key, _redacted(key, value)), {}))

    def options(self, **options) -> _Reader:
        shown = {k: _redacted(k, v) for k, v in options.items()}
        return self._with(options, _call("options", (), shown))

    def schema(self, schema: Typed | StructType) -> _Reader:
        if isinstance(schema, StructType):  # a schema rendering fixes: written out
            schema = Typed(_parts(schema), {f.name: f.dataType for f in schema})
        return self._with({_SCHEMA: schema}, _call("schema", (schema,), {}))

    def _with(self, options: dict, parts: tuple) -> _Reader:
        return _Reader(self.recording, self.parts + parts, {**self.given, **options})

    def parquet(self, *paths) -> Frame:
        return Frame(self.recording, self.parts + _call("parquet", paths, {}), dict(self.given[_SCHEMA].fields))

    def load(self) -> Frame:
        given = {k: v for k, v in self.given.items() if isinstance(v, str)}
        schema = Options.of(given).schema()
        return Frame(self.recording, self.parts + (".load()",), {f.name: f.dataType for f in schema})


class _Session(Expr):
    """The `spark` of a recording."""

    def __init__(self, recording: Recording) -> None:
        super().__init__(("spark",))
        self.recording = recording

    @property
    def read(self) -> _Reader:
        return _Reader(self.recording, ("spark.read",), {})

    @property
    def readStream(self) -> _Reader:
        return _Reader(self.recording, ("spark.readStream",), {})

    def sql(self, text: str) -> Frame:
        names = sqlglot.parse_one(text, read="spark").named_selects
        return Frame(self.recording, ("spark.sql(", _Sql(text), ")"), dict.fromkeys(names))

    def createDataFrame(self, data, schema: StructType) -> Frame:
        if isinstance(data, pa.Table):  # as sluice gives a table's rows: through Arrow
            self.recording.imports |= {"import pyarrow as pa", "from pyspark.sql.pandas.types import to_arrow_schema"}
            arrow_schema = Expr(("to_arrow_schema",) + _arguments((schema,), {"timezone": "UTC"}))
            data = Expr(("pa.Table.from_pylist",) + _arguments((data.to_pylist(),), {"schema": arrow_schema}))
        parts = ("spark.createDataFrame",) + _arguments((data, schema), {})
        return Frame(self.recording, parts, {f.name: f.dataType for f in schema})


class Typed(Expr):
    """An expression giving a schema whose `fields` the recording knows (name → Spark
    type or None; a struct's type may be a dict of its fields)."""

    def __init__(self, parts: tuple, fields: dict) -> None:
        super().__init__(parts)
        self.fields = fields


def with_fields(schema, extra: list[StructField]):
    """`schema` (a frame's) followed by the fields `extra`."""
    if not isinstance(schema, _Schema):
        return StructType(schema.fields + extra)
    fields = {**schema.frame.fields, **{f.name: f.dataType for f in extra}}
    return Typed(("StructType(", schema.frame, ".schema.fields + ") + _parts(extra) + (")",), fields)


class _Sql:
    """Spark SQL text, written as a triple-quoted string where it can be."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Namespace:
    """`F` or `Window`: the PySpark module's, or a recording's expressions."""

    def __init__(self, name: str, real) -> None:
        self._name = name
        self._real = real

    def __getattr__(self, attr: str):
        if _RECORDING.get() is None:
            return getattr(self._real, attr)
        return _Attribute((f"{self._name}.{attr}",), attr)


F = _Namespace("F", _functions)
Window = _Namespace("Window", _Window)


class Recording:
    """The statements of a program being recorded, and the DataFrames they use."""

    def __init__(self) -> None:
        self.spark = _Session(self)
        self.frames: list[Frame] = []
        self.statements: list[tuple] = []  # (target variable or None, parts)
        self.names: dict[int, str] = {}  # id(frame) → the variable it is bound to
        self.comments: dict[int, str] = {}  # statement index → comment above it
        self.frame_comments: dict[int, str] = {}  # id(frame) → comment above its variable
        self.imports: set[str] = set()  # what the program imports beyond the usual

    def statement(self, parts: tuple, target: str | None = None) -> None:
        self.statements.append((target, parts))

    def bind_result(self, parts: tuple, method: str) -> Expr:
        name = {"collect": "rows", "first": "first_error"}.get(method, method)
        if any(target == name for target, _ in self.statements):
            name = f"{name}_{len(self.statements)}"
        self.statement(parts, name)
        return Expr((name,))

    def bind(self, frame: Frame, name: str, comment: str | None = None) -> None:
        """Bind `frame` to the variable `name` here (a variable the program shows)."""
        self.names[id(frame)] = name
        if comment is not None:
            self.comments[len(self.statements)] = comment
        self.statement((frame,), name)

    def name(self, frame: Frame, name: str, comment: str | None = None) -> None:
        """Where `frame` is used, it is the variable `name` (under `comment`)."""
        self.names[id(frame)] = name
        if comment is not None:
            self.frame_comments[id(frame)] = comment

    def typed(self, frame: Frame, types: dict[str, DataType]) -> Frame:
        """`frame`, those of its columns whose types it does not know known to have these."""
        fields = frame.fields
        fields.update((name, types[name]) for name, known in fields.items() if known is None and name in types)
        return frame

    def comment(self, text: str) -> None:
        self.comments[len(self.statements)] = text

    def raw(self, *lines: str) -> None:
        """Lines of Python written as they are."""
        self.statements.append((_RAW, tuple(lines)))

    def returns(self, value: Expr) -> None:
        """`return value`, in a function being recorded."""
        self.statement(value.parts, _RETURN)

    @contextmanager
    def function(self, name: str, *parameters: str, comment: str | None = None) -> Iterator[Recording]:
        """Within: the recording of the body of `def name(parameters)`, which is written
        here once it is done. Its frames are its own: the parameters, what it derives."""
        body = Recording()
        body.imports = self.imports
        token = _RECORDING.set(body)
        try:
            yield body
        finally:
            _RECORDING.reset(token)
        if comment is not None:
            self.comment(comment)
        self.raw(f"def {name}({', '.join(parameters)}):", *(f"    {line}" for line in body.lines()))

    def frames_viewed_as(self, view: str) -> list[Frame]:
        """The frames registered as the temporary view `view`."""
        called = (".createOrReplaceTempView", "(", _literal(view), ")")
        return [
            parts[0]
            for _, parts in self.statements
            if len(parts) == len(called) + 1 and all(isinstance(p, str) for p in parts[1:]) and parts[1:] == called
        ]

    def lines(self) -> list[str]:
        uses: dict[int, int] = {}
        seen: set[int] = set()
        for target, parts in self.statements:
            if target is not _RAW:
                _count_uses(parts, uses, seen)
        written: set[int] = set()
        lines: list[str] = []
        anonymous = iter(f"df{i}" for i in range(1, 1_000_000))
        for index, (target, parts) in enumerate(self.statements):
            comment = self.comments.get(index)
            if target is _RAW:
                lines += _comment_lines(comment) + list(parts)
                continue
            bound = len(parts) == 1 and isinstance(parts[0], Frame) and target is not None
            if bound and id(parts[0]) in written:
                continue  # bound already, where a statement before used it
            # A named frame is written where it is bound; what it uses comes first.
            writer = _Writer(self, uses, written, lines, anonymous)
            text = writer.inline(parts[0]) if bound else writer.expression(parts)
            if bound:
                written.add(id(parts[0]))
            lines += _comment_lines(comment) + _statement_lines(target, text)
        return lines


def _count_uses(parts: tuple, uses: dict[int, int], seen: set[int]) -> None:
    for part in parts:
        if isinstance(part, Frame):
            uses[id(part)] = uses.get(id(part), 0) + 1
            if id(part) not in seen:
                seen.add(id(part))
                _count_uses(part.parts, uses, seen)


class _Writer:
    """Writes expressions, binding each DataFrame used more than once (or named) to a
    variable before the statement that first uses it."""

    def __init__(self, recording: Recording, uses, written, lines, anonymous) -> None:
        self.names, self.comments = recording.names, recording.frame_comments
        self.uses, self.written, self.lines, self.anonymous = uses, written, lines, anonymous

    def expression(self, parts: tuple) -> str:
        return "".join(self.part(p) for p in parts)

    def part(self, part) -> str:
        if isinstance(part, _Sql):
            return _sql_literal(part.text)
        if not isinstance(part, Frame):
            return part
        if len(part.parts) == 1 and isinstance(part.parts[0], str) and part.parts[0].isidentifier():
            return part.parts[0]  # a variable already, such as a function's parameter
        key = id(part)
        if key in self.written:
            return self.names[key]
        if self.uses.get(key, 0) > 1 or key in self.names:
            if key not in self.names:
                self.names[key] = next(self.anonymous)
            name = self.names[key]
            text = self.inline(part)
            self.written.add(key)
            self.lines += _comment_lines(self.comments.get(key)) + _statement_lines(name, text)
            return name
        return self.inline(part)

    def inline(self, frame: Frame) -> str:
        return self.expression(frame.parts)


def _comment_lines(comment: str | None) -> list[str]:
    return [] if comment is None else [f"# {line}" for line in comment.split("\n")]


def _statement_lines(target: str | None, text: str) -> list[str]:
    """`target = text` with a method chain one call a line, as PySpark is written."""
    calls = _split_chain(text)
    head = "return " if target is _RETURN else f"{target} = " if target is not None else ""
    if len(calls) <= 2 and len(head) + len(text) <= 100:
        return [head + text]
    return [f"{head}(", *(f"    {c}" for c in calls), ")"]


def _split_chain(text: str) -> list[str]:
    """`a.b(…).c(…)` → [`a.b(…)`, `.c(…)`], split only at the top level."""
    calls, start = [], 0
    for i, ch, depth in _code(text):
        if ch == "." and depth == 0 and i > start and text[i - 1] == ")":
            calls.append(text[start:i])
            start = i
    calls.append(text[start:])
    return calls


def _code(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth before it) of each character of a line of Python
    outside its string literals."""
    depth, quote, i = 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if text.startswith(quote, i) and text[i - 1] != "\\":
                i += len(quote) - 1
                quote = None
        elif text.startswith('"""', i):
            quote = '"""'
            i += 2
        elif ch in "\"'":
            quote = ch
        else:
            yield i, ch, depth
            depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        i += 1


def wrapped(line: str, width: int) -> list[str]:
    """A line of the program as lines of at most `width` characters where Python lets it
    break: a comment at its spaces, code inside its largest outermost brackets, one
    argument a line (a string literal longer than `width` stays whole)."""
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    if line.lstrip().startswith("#"):
        words = line.lstrip()[2:].split(" ")
        out = [f"{indent}#"]
        for word in words:
            if len(out[-1]) + 1 + len(word) > width and out[-1] != f"{indent}#":
                out.append(f"{indent}#")
            out[-1] += " " + word
        return out
    groups = _outermost_groups(line)
    if not groups:
        return [line]
    # The largest group that opens within the width (a later one is split in what follows it).
    fitting = [g for g in groups if g[0] < width] or groups[:1]
    opening, closing, commas = max(fitting, key=lambda g: g[1] - g[0])
    if closing - opening <= 1:
        return [line]
    bounds = [opening, *commas, closing]
    items = [line[a + 1 : b].strip() for a, b in itertools.pairwise(bounds)]
    inner = indent + "    "
    out = [line[: opening + 1]]
    for n, item in enumerate(items):
        out += wrapped(inner + item + ("," if n < len(items) - 1 else ""), width)
    return out + wrapped(indent + line[closing:], width)


def _outermost_groups(line: str) -> list[tuple[int, int, list[int]]]:
    """(opening, closing, commas inside) of each bracket pair at the line's outermost level."""
    groups, stack, lowest = [], [], 0
    for i, ch, depth in _code(line):
        if ch in "([{":
            if depth <= lowest:
                lowest = depth
                stack = [(i, [])]
            elif stack:
                stack.append((i, None))
        elif ch in ")]}":
            lowest = min(lowest, depth - 1)
            if stack:
                opening, commas = stack.pop()
                if commas is not None:
                    groups.append((opening, i, commas))
        elif ch == "," and len(stack) == 1 and stack[0][1] is not None:
            stack[0][1].append(i)
    return groups


def _sql_literal(text: str) -> str:
    if '"""' not in text and "\\" not in text and not text.endswith('"'):
        return f'"""{text}"""'
    return _literal(text)


def _redacted(key: str, value):
    return "<redacted>" if _REDACTED.search(key) else value


def _call(method: str, args: tuple, kwargs: dict) -> tuple:
    return (f".{method}",) + _arguments(args, kwargs)


def _arguments(args: tuple, kwargs: dict) -> tuple:
    parts: tuple = ("(",)
    written = [_parts(a) for a in args]
    for key, value in kwargs.items():
        if key.isidentifier() and not keyword.iskeyword(key):
            written.append((f"{key}=",) + _parts(value))
        else:
            written.append((f"**{{{_literal(key)}: ",) + _parts(value) + ("}",))
    for i, argument in enumerate(written):
        parts += ((", ",) if i else ()) + argument
    return parts + (")",)


def _parts(value) -> tuple:
    if isinstance(value, Frame):  # written once, where a variable holds it if used again
        return (value,)
    if isinstance(value, Expr):
        return value.parts
    if isinstance(value, (list, tuple)):
        inner: tuple = ()
        for i, item in enumerate(value):
            inner += ((", ",) if i else ()) + _parts(item)
        if isinstance(value, tuple):
            return ("(",) + inner + ((",)",) if len(value) == 1 else (")",))
        return ("[",) + inner + ("]",)
    if isinstance(value, types.FunctionType):  # a higher-order function's lambda
        names = tuple(inspect.signature(value).parameters)
        return (f"lambda {', '.join(names)}: ",) + _parts(value(*(Expr((n,)) for n in names)))
    if isinstance(value, dict):
        inner = ()
        for i, (key, item) in enumerate(value.items()):
            inner += ((", ",) if i else ()) + _parts(key) + (": ",) + _parts(item)
        return ("{",) + inner + ("}",)
    return (_literal(value),)


def _literal(value) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (bytes, bool, int, float)) or value is None or isinstance(value, DataType):
        return repr(value)
    if isinstance(value, datetime.date):  # a value of a table's row
        _RECORDING.get().imports.add("import datetime")
        return repr(value)
    if isinstance(value, decimal.Decimal):
        _RECORDING.get().imports.add("import decimal")
        return f"decimal.{value!r}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _constructed(value)
    raise Unrecordable(f"a {type(value).__name__} argument")


def _constructed(value) -> str:
    """A dataclass instance (sluice's own: a format, a Python step of the program) as
    the call of its class that makes it, the class imported by its module's path."""
    cls = type(value)
    _RECORDING.get().imports.add(f"from {cls.__module__} import {cls.__name__}")
    given = {
        f.name: getattr(value, f.name)
        for f in dataclasses.fields(value)
        if f.init and (isinstance(getattr(value, f.name), Expr) or not (f.default is not dataclasses.MISSING and getattr(value, f.name) == f.default))
    }
    return cls.__name__ + "".join(_arguments((), given))


def fail_if(condition, error: SqlError) -> None:
    """Raise `error` if `condition` holds; recorded, the `if` that raises its message."""
    if not isinstance(condition, Expr):
        if condition:
            raise error
        return
    pieces = error.message.split("\x00")
    message = _literal(error.message)
    if len(pieces) > 1:  # literal text and placeholders, alternately
        text = "".join(
            p.replace("{", "{{").replace("}", "}}") if i % 2 == 0 else "{" + p + "}" for i, p in enumerate(pieces)
        )
        message = "f" + _literal(text)
    _RECORDING.get().raw(f"if {''.join(condition.parts)}:", f"    raise RuntimeError({message})")


class SchemaIds:
    """A schema registry to a recording: the id of a schema registered under a subject is
    the program's variable `schema_ids[subject]`; nothing is registered."""

    def register(self, subject: str, schema: str) -> Expr:
        return Expr((f"schema_ids[{_literal(subject)}]",))


def recorded() -> bool:
    """Whether a recording is active: what the renderer is asked is being written down."""
    return _RECORDING.get() is not None


@contextmanager
def recording() -> Iterator[Recording]:
    """Within: `F`, `Window` and the recording's `spark` record what they are asked."""
    active = Recording()
    token = _RECORDING.set(active)
    try:
        yield active
    finally:
        _RECORDING.reset(token)
