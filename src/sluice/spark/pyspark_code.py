"""The renderer's PySpark calls as the Python that makes them: EXPLAIN PYSPARK's program.

The renderer reaches Spark's functions through `F` and `Window` here. They are
`pyspark.sql.functions` and `pyspark.sql.window.Window` — except while a `recording()` is
active, when they and the stand-in `spark` session a recording hands out return
expressions that write themselves as Python instead of building Spark objects. The same
rendering code runs either way, so the printed program is the one Spark runs; no JVM is
started for it.

This module is the switch, and the calls rendering makes that differ once recorded
(`fail_if`, `SchemaIds`). The recorded expressions are in `pyspark_expr.py`, the recording
with its DataFrames and statements in `pyspark_frame.py`, the program's lines in
`pyspark_layout.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import functions as _functions
from pyspark.sql.window import Window as _Window

from sluice.errors import SqlError
from sluice.spark.pyspark_expr import RECORDING, Attribute, Expr, literal
from sluice.spark.pyspark_frame import Recording


class _Namespace:
    """`F` or `Window`: the PySpark module's, or a recording's expressions."""

    def __init__(self, name: str, real) -> None:
        self._name = name
        self._real = real

    def __getattr__(self, attr: str):
        if RECORDING.get() is None:
            return getattr(self._real, attr)
        return Attribute((f"{self._name}.{attr}",), attr)


F = _Namespace("F", _functions)
Window = _Namespace("Window", _Window)


def fail_if(condition, error: SqlError) -> None:
    """Raise `error` if `condition` holds; recorded, the `if` that raises its message."""
    if not isinstance(condition, Expr):
        if condition:
            raise error
        return
    pieces = error.message.split("\x00")
    message = literal(error.message)
    if len(pieces) > 1:  # literal text and placeholders, alternately
        text = "".join(
            p.replace("{", "{{").replace("}", "}}") if i % 2 == 0 else "{" + p + "}" for i, p in enumerate(pieces)
        )
        message = "f" + literal(text)
    RECORDING.get().raw(f"if {''.join(condition.parts)}:", f"    raise RuntimeError({message})")


class SchemaIds:
    """A schema registry to a recording: the id of a schema registered under a subject is
    the program's variable `schema_ids[subject]`; nothing is registered."""

    def register(self, subject: str, schema: str) -> Expr:
        return Expr((f"schema_ids[{literal(subject)}]",))


def recorded() -> bool:
    """Whether a recording is active: what the renderer is asked is being written down."""
    return RECORDING.get() is not None


@contextmanager
def recording() -> Iterator[Recording]:
    """Within: `F`, `Window` and the recording's `spark` record what they are asked."""
    active = Recording()
    token = RECORDING.set(active)
    try:
        yield active
    finally:
        RECORDING.reset(token)
