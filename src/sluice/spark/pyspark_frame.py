"""A recording: the DataFrames it hands out and the statements they make, written as the
program's lines.

A DataFrame of a recording (`Frame`) knows its columns (and the types of those that come
from the Kafka reader's schema or a literal schema), because rendering looks at them;
DataFrame methods give new frames, statements or a job's result. The recording's `spark`
stands in for the Spark session: its readers and `sql` give frames. A DataFrame used once
is written inline where it is used; one used more often, or named, is bound to a variable
first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import sqlglot
from pyspark.sql.types import DataType, StructType

from sluice.errors import InternalError
from sluice.spark.kafka_source import Options
from sluice.spark.pyspark_expr import RECORDING, Expr, Sql, Unrecordable, arguments, call, literal, parts_of
from sluice.spark.pyspark_layout import RETURN, Return, comment_lines, sql_literal, statement_lines

_RAW = object()  # the target of a statement of raw lines
_SCHEMA = object()  # a reader's schema, among its options

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
        return Expr((self,) + ("[",) + parts_of(key) + ("]",), key if isinstance(key, str) else None)

    def as_operand(self) -> tuple:
        return (self,)  # written once, where a variable holds it if used again

    def derived(self, parts: tuple, fields: dict[str, DataType | None]) -> Frame:
        return Frame(self.recording, parts, fields)


class _Schema(Expr):
    """`frame.schema`: its fields; as an argument, the frame's schema. A type the recording
    does not know is written as the frame's own, `frame.schema["name"].dataType`."""

    def __init__(self, frame: Frame) -> None:
        super().__init__((frame, ".schema"))
        self.frame = frame

    def __getitem__(self, name: str) -> _Field:
        known = self.frame.fields[name]
        data_type = Expr((self.frame, f'.schema["{name}"].dataType')) if known is None else known
        return _Field(self.frame, name, data_type)

    def __iter__(self) -> Iterator:
        return (self[name] for name in self.frame.fields)

    @property
    def fields(self) -> list[_Field]:
        return list(self)


class _Field(Expr):
    """A field of `frame.schema`: its `name` and `dataType`; as an argument,
    `frame.schema["name"]`."""

    def __init__(self, frame: Frame, name: str, data_type: DataType | Expr) -> None:
        super().__init__((frame, f'.schema["{name}"]'), name)
        self.dataType = data_type


class _Method:
    """`frame.method`, called: a new DataFrame, a statement, or a job's result."""

    def __init__(self, frame: Frame, method: str) -> None:
        self.frame = frame
        self.method = method

    def __call__(self, *args, **kwargs):
        frame, method = self.frame, self.method
        parts = (frame, f".{method}") + arguments(args, kwargs)
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
        parts = self.parts + call("agg", columns, {})
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
        return self._with({}, call("format", (name,), {}))

    def option(self, key: str, value) -> _Reader:
        return self._with({key: value}, call("option", (key, _redacted(key, value)), {}))

    def options(self, **options) -> _Reader:
        shown = {k: _redacted(k, v) for k, v in options.items()}
        return self._with(options, call("options", (), shown))

    def schema(self, schema: Typed | StructType) -> _Reader:
        if isinstance(schema, StructType):  # a schema rendering fixes: written out
            schema = Typed(parts_of(schema), {f.name: f.dataType for f in schema})
        return self._with({_SCHEMA: schema}, call("schema", (schema,), {}))

    def _with(self, options: dict, parts: tuple) -> _Reader:
        return _Reader(self.recording, self.parts + parts, {**self.given, **options})

    def parquet(self, *paths) -> Frame:
        return Frame(self.recording, self.parts + call("parquet", paths, {}), dict(self.given[_SCHEMA].fields))

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
        query = sqlglot.parse_one(text, read="spark")
        if not isinstance(query, sqlglot.exp.Selectable):  # rendering asks Spark SQL for frames only
            raise InternalError.bug(f"spark.sql of a statement that gives no frame: {text}")
        return Frame(self.recording, ("spark.sql(", Sql(text), ")"), dict.fromkeys(query.named_selects))

    def createDataFrame(self, data, schema: StructType) -> Frame:
        if isinstance(data, pa.Table):  # as sluice gives a table's rows: through Arrow
            self.recording.imports |= {"import pyarrow as pa", "from pyspark.sql.pandas.types import to_arrow_schema"}
            arrow_schema = Expr(("to_arrow_schema",) + arguments((schema,), {"timezone": "UTC"}))
            data = Expr(("pa.Table.from_pylist",) + arguments((data.to_pylist(),), {"schema": arrow_schema}))
        parts = ("spark.createDataFrame",) + arguments((data, schema), {})
        return Frame(self.recording, parts, {f.name: f.dataType for f in schema})


class Typed(Expr):
    """An expression giving a schema whose `fields` the recording knows (name → Spark
    type or None; a struct's type may be a dict of its fields)."""

    def __init__(self, parts: tuple, fields: dict) -> None:
        super().__init__(parts)
        self.fields = fields


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

    def statement(self, parts: tuple, target: str | Return | None = None) -> None:
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
        self.statement(value.parts, RETURN)

    @contextmanager
    def function(self, name: str, *parameters: str, comment: str | None = None) -> Iterator[Recording]:
        """Within: the recording of the body of `def name(parameters)`, which is written
        here once it is done. Its frames are its own: the parameters, what it derives."""
        body = Recording()
        body.imports = self.imports
        token = RECORDING.set(body)
        try:
            yield body
        finally:
            RECORDING.reset(token)
        if comment is not None:
            self.comment(comment)
        self.raw(f"def {name}({', '.join(parameters)}):", *(f"    {line}" for line in body.lines()))

    def frames_viewed_as(self, view: str) -> list[Frame]:
        """The frames registered as the temporary view `view`."""
        called = (".createOrReplaceTempView", "(", literal(view), ")")
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
                lines += comment_lines(comment) + list(parts)
                continue
            bound = len(parts) == 1 and isinstance(parts[0], Frame) and target is not None
            if bound and id(parts[0]) in written:
                continue  # bound already, where a statement before used it
            # A named frame is written where it is bound; what it uses comes first.
            writer = _Writer(self, uses, written, lines, anonymous)
            text = writer.inline(parts[0]) if bound else writer.expression(parts)
            if bound:
                written.add(id(parts[0]))
            lines += comment_lines(comment) + statement_lines(target, text)
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
        if isinstance(part, Sql):
            return sql_literal(part.text)
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
            self.lines += comment_lines(self.comments.get(key)) + statement_lines(name, text)
            return name
        return self.inline(part)

    def inline(self, frame: Frame) -> str:
        return self.expression(frame.parts)


def _redacted(key: str, value):
    return "<redacted>" if _REDACTED.search(key) else value
