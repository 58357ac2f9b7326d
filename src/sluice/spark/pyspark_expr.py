"""A recorded PySpark expression, and any Python value written as the code that makes it.

An `Expr` is a sequence of text and the DataFrames it refers to (kept whole, so that the
program writes each once); calling it, indexing it, reading its attributes or combining it
with operators gives the longer expression PySpark would have built. `parts_of` writes an
argument — a list, a dict, a lambda, a literal, a dataclass of sluice's own — as parts; a
value it cannot write is `Unrecordable`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import decimal
import inspect
import json
import keyword
import types
from collections.abc import Iterator
from typing import Any

from pyspark.sql.types import DataType

_PLACEHOLDER = "\x00{}\x00"  # an expression's value in a message
# The recording active in this context, or None (a `pyspark_frame.Recording`, which is
# built on this module): a literal needing an import adds it to the recording's `imports`.
RECORDING: contextvars.ContextVar[Any] = contextvars.ContextVar("recording", default=None)


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
        return Attribute(self.parts + (f".{attr}",), attr)

    def __getitem__(self, key) -> Expr:
        return Expr(self.parts + ("[",) + parts_of(key) + ("]",))

    def __call__(self, *args, **kwargs) -> Expr:
        return Expr(self.parts + arguments(args, kwargs))

    def __bool__(self) -> bool:
        raise TypeError("a recorded PySpark expression has no truth value")

    def __iter__(self) -> Iterator:
        raise TypeError("a recorded PySpark expression is not iterable")

    __hash__ = object.__hash__

    def as_operand(self) -> tuple:
        """The parts writing this expression inside another: its own (a DataFrame is kept
        whole instead)."""
        return self.parts

    def __format__(self, spec: str) -> str:
        """In a message, a placeholder `fail_if` writes as the expression's value."""
        return _PLACEHOLDER.format("".join(p for p in self.parts if isinstance(p, str)))

    def _binary(self, operator: str, other, reflected: bool = False) -> Expr:
        left, right = (parts_of(other), self.parts) if reflected else (self.parts, parts_of(other))
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


class Attribute(Expr):
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


class Sql:
    """Spark SQL text, written as a triple-quoted string where it can be."""

    def __init__(self, text: str) -> None:
        self.text = text


def call(method: str, args: tuple, kwargs: dict) -> tuple:
    """`.method(args…, kwargs…)` as parts."""
    return (f".{method}",) + arguments(args, kwargs)


def arguments(args: tuple, kwargs: dict) -> tuple:
    """A call's parenthesised arguments as parts (a keyword no identifier can spell as `**{…}`)."""
    parts: tuple = ("(",)
    written = [parts_of(a) for a in args]
    for key, value in kwargs.items():
        if key.isidentifier() and not keyword.iskeyword(key):
            written.append((f"{key}=",) + parts_of(value))
        else:
            written.append((f"**{{{literal(key)}: ",) + parts_of(value) + ("}",))
    for i, argument in enumerate(written):
        parts += ((", ",) if i else ()) + argument
    return parts + (")",)


def parts_of(value) -> tuple:
    """The parts writing `value` as an argument: an expression as an operand; a list, tuple,
    dict or lambda item by item; anything else as a literal."""
    if isinstance(value, Expr):
        return value.as_operand()
    if isinstance(value, (list, tuple)):
        inner: tuple = ()
        for i, item in enumerate(value):
            inner += ((", ",) if i else ()) + parts_of(item)
        if isinstance(value, tuple):
            return ("(",) + inner + ((",)",) if len(value) == 1 else (")",))
        return ("[",) + inner + ("]",)
    if isinstance(value, types.FunctionType):  # a higher-order function's lambda
        names = tuple(inspect.signature(value).parameters)
        return (f"lambda {', '.join(names)}: ",) + parts_of(value(*(Expr((n,)) for n in names)))
    if isinstance(value, dict):
        inner = ()
        for i, (key, item) in enumerate(value.items()):
            inner += ((", ",) if i else ()) + parts_of(key) + (": ",) + parts_of(item)
        return ("{",) + inner + ("}",)
    return (literal(value),)


def literal(value) -> str:
    """`value` as Python source; a date, decimal or dataclass adds its import to the active
    recording's program."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (bytes, bool, int, float)) or value is None or isinstance(value, DataType):
        return repr(value)
    if isinstance(value, datetime.date):  # a value of a table's row
        RECORDING.get().imports.add("import datetime")
        return repr(value)
    if isinstance(value, decimal.Decimal):
        RECORDING.get().imports.add("import decimal")
        return f"decimal.{value!r}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _constructed(value)
    raise Unrecordable(f"a {type(value).__name__} argument")


def _constructed(value) -> str:
    """A dataclass instance (sluice's own: a format, a Python step of the program) as
    the call of its class that makes it, the class imported by its module's path."""
    cls = type(value)
    RECORDING.get().imports.add(f"from {cls.__module__} import {cls.__name__}")
    given = {
        f.name: getattr(value, f.name)
        for f in dataclasses.fields(value)
        if f.init and (isinstance(getattr(value, f.name), Expr) or not (f.default is not dataclasses.MISSING and getattr(value, f.name) == f.default))
    }
    return cls.__name__ + "".join(arguments((), given))
