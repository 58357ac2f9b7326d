"""Resolving names in statements to catalog items.

One namespace: `x`, `public.x` and `materialize.public.x` all name item `x`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from sluice.catalog.items import RELATIONS, Item, a_kind
from sluice.catalog.store import Catalog
from sluice.errors import DuplicateObject, InvalidParameterValue, UndefinedObject, WrongObjectType
from sluice.syntax import ast

SCHEMA_QUALIFIERS = (("public",), ("materialize", "public"))


def item_name(name: ast.ObjectName) -> str:
    *qualifiers, last = (p.value for p in name.parts)
    if qualifiers and tuple(qualifiers) not in SCHEMA_QUALIFIERS:
        raise UndefinedObject(f"unknown schema '{'.'.join(qualifiers)}'", span=name.span)
    return last


def resolve(catalog: Catalog, name: ast.ObjectName, *kinds: str) -> Item:
    """The item `name` names, which must be of one of `kinds` (any kind when none given)."""
    item = catalog.get(item_name(name))
    if item is None:
        raise unknown_item(str(name), name.span, (i.name for i in catalog if not kinds or i.kind in kinds))
    if kinds and item.kind not in kinds:
        wanted = "relation" if set(kinds) <= set(RELATIONS) and len(kinds) > 2 else kinds[0]
        raise WrongObjectType(f'"{item.name}" is {a_kind(item.kind)}, not {a_kind(wanted)}', span=name.span)
    return item


def unknown_item(name: str, span, known: Iterable[str]) -> UndefinedObject:
    """The error for a name no catalog item has, with the most alike of `known` as HINT."""
    hint = did_you_mean(name.rsplit(".", 1)[-1], known)
    return UndefinedObject(f"unknown catalog item '{name}'", span=span, hint=hint)


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """A hint naming the known name most like the unknown `name`, when one is alike."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    return f'did you mean "{close[0]}"?' if close else None


def ensure_free(catalog: Catalog, name: str, span) -> None:
    if catalog.get(name) is not None:
        raise DuplicateObject(f"catalog item '{name}' already exists", span=span)


def check_column_names(kind: str, name: ast.ObjectName, names: tuple[ast.Ident, ...], arity: int) -> None:
    """A column list (`CREATE SOURCE s (a, b)`, `CREATE VIEW v (a, b)`) names at most as
    many columns as the relation has; the text is Materialize's."""
    if len(names) <= arity:
        return
    relation = f"{kind} {name.to_sql()}"
    raise InvalidParameterValue(
        f"{relation} definition names {_count(len(names), 'column')}, "
        f"but {relation} has {_count(arity, 'column')}",
        span=names[arity].span,
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
