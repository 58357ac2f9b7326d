"""JSON encoding of the catalog's frozen dataclasses, driven by their type hints.

Handles what catalog items are made of: dataclasses, tuples, optionals, unions of
dataclasses (tagged by class name), primitives, and the types that encode themselves
(`SqlType`, `Column`, `Timeline`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any

from sluice.catalog.timeline import Timeline
from sluice.catalog.types import Column, SqlType

_PRIMITIVES = (str, int, float, bool, type(None))


def encode(value: Any) -> Any:
    if isinstance(value, (SqlType, Column)):
        return value.to_json()
    if isinstance(value, Timeline):
        return str(value)
    if dataclasses.is_dataclass(value):
        out = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"@": type(value).__name__, **out}
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    if isinstance(value, _PRIMITIVES):
        return value
    raise TypeError(f"cannot encode {type(value).__name__}")


def decode(hint: Any, data: Any) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None and type(None) in options:
            return None
        concrete = [o for o in options if o is not type(None)]
        if isinstance(data, dict) and "@" in data:
            (match,) = [o for o in concrete if getattr(o, "__name__", None) == data["@"]]
            return decode(match, data)
        return decode(concrete[0], data)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in data)
        return tuple(decode(a, v) for a, v in zip(args, data, strict=True))
    if hint is SqlType:
        return SqlType.from_json(data)
    if hint is Column:
        return Column.from_json(data)
    if hint is Timeline:
        return Timeline.parse(data)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        kwargs = {name: decode(hints[name], data[name]) for name in hints if name in data}
        return hint(**kwargs)
    if hint in _PRIMITIVES:
        if not isinstance(data, hint) and not (hint is float and isinstance(data, int)):
            raise TypeError(f"expected {hint.__name__}, found {type(data).__name__}")
        return data
    raise TypeError(f"cannot decode {hint!r}")


@cache
def _hints(cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}
