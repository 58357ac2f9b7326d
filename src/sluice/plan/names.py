"""Resolving names in statements to catalog items.

One namespace: `x`, `public.x` and `materialize.public.x` all name item `x`.
"""

from __future__ import annotations

from sluice.catalog.items import RELATIONS, Item, a_kind
from sluice.catalog.store import Catalog
from sluice.errors import DuplicateObject, UndefinedObject, WrongObjectType
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
        raise UndefinedObject(f"unknown catalog item '{name}'", span=name.span)
    if kinds and item.kind not in kinds:
        wanted = "relation" if set(kinds) <= set(RELATIONS) and len(kinds) > 2 else kinds[0]
        raise WrongObjectType(f'"{item.name}" is {a_kind(item.kind)}, not {a_kind(wanted)}', span=name.span)
    return item


def ensure_free(catalog: Catalog, name: str, span) -> None:
    if catalog.get(name) is not None:
        raise DuplicateObject(f"catalog item '{name}' already exists", span=span)
