"""Expressions whose value is an evaluation error's text (`Evaluation error: …`, DESIGN.md
§4) or NULL when there is none, and the two ways the evaluation rules combine them."""

from __future__ import annotations

from sqlglot import exp

from sluice.errors import EVALUATION_ERROR as PREFIX

Err = exp.Expr | None


def text(message: str) -> exp.Expr:
    return exp.Literal.string(PREFIX + message)


def first(errors: list[Err]) -> Err:
    """The first error of `errors` that happens (their COALESCE); None if none can."""
    present = [e for e in errors if e is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return exp.Coalesce(this=present[0], expressions=present[1:])


def when(condition: exp.Expr, then: Err, otherwise: Err = None) -> Err:
    """`then` where `condition` holds, else `otherwise`."""
    if then is None and otherwise is None:
        return None
    return exp.Case(
        ifs=[exp.If(this=condition, true=then if then is not None else exp.Null())], default=otherwise
    )
