"""Rule helper: a query's errors reported in its own pass (`Fusion`).

Errors are rare, and an errors query re-reads what its SELECT reads. So where the root
SELECT's rows are all read, it also carries a boolean column per errors query saying
which rows (or groups) it would find, and its WHERE and HAVING keep those rows: only when
one says so is the errors query run, to name the error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlglot import exp

from sluice.errors import InternalError
from sluice.lower.errors_queries import Found


@dataclass
class Fusion:
    """How the root SELECT of a query whose rows are all read reports its errors in the
    same pass: in a hidden boolean column per error kind (true on a row, or group, whose
    errors query would find it), so a query without errors runs once. `carried` maps a
    relation it reads to that relation's own flag columns, carried up when it is the
    SELECT's only input (no join can drop its failing rows)."""

    names: Iterator[str]
    carried: dict[str, list[str]] = field(default_factory=dict)


def fusable(select: exp.Select, found: list[Found]) -> bool:
    """Whether every row or group `select` makes is read (no LIMIT, OFFSET or FETCH) and
    no join of it can fail (a pair whose ON fails is not joined to be seen)."""
    if any(select.args.get(k) is not None for k in ("limit", "offset", "fetch")):
        return False
    return all(j is None for f in found if f[0] is select for j in f[2])


def fuse(select: exp.Select, grouped: bool, entries: list[Found], fusion: Fusion) -> list[str]:
    """Flag columns for `select`'s own errors (the evaluation rule's entries for it)."""
    names = []
    for _, err, _, clauses in entries:
        if err is None:  # fusable: no join of it fails, so each entry has a row's error
            raise InternalError.bug("a fused select's entry without its error")
        names.append(next(fusion.names))
        failed = exp.not_(exp.Is(this=err.copy(), expression=exp.Null()))
        per_row, widen_where = "group" not in clauses, "where" not in clauses
        _report(select, grouped, failed, names[-1], per_row=per_row, widen_where=widen_where)
    return names


def carry(select: exp.Select, grouped: bool, fusion: Fusion) -> list[str]:
    """The flag columns of `select`'s only input, carried on in its own rows."""
    from_ = select.args.get("from_")
    if select.args.get("joins") or from_ is None or not isinstance(from_.this, exp.Table):
        return []
    table = from_.this
    flags = fusion.carried.get(table.name, [])
    for flag in flags:
        _report(select, grouped, exp.column(flag, table=table.alias_or_name), flag, per_row=True, widen_where=True)
    return flags


def _report(
    select: exp.Select, grouped: bool, failed: exp.Expr, name: str, per_row: bool, widen_where: bool
) -> None:
    """Add column `name`: whether a row (or, grouped, a group) has `failed`. Rows and
    groups it marks are kept by the WHERE and HAVING, so the flag reaches the result."""
    if widen_where:
        _widen(select, "where", failed)
    if per_row and grouped:
        failed = exp.Max(this=failed.copy())
    if grouped:
        _widen(select, "having", failed)
    select.select(exp.alias_(failed.copy(), name), append=True, copy=False)


def _widen(select: exp.Select, clause: str, condition: exp.Expr) -> None:
    node = select.args.get(clause)
    if node is not None:
        node.set("this", exp.or_(exp.paren(node.this), condition.copy()))
