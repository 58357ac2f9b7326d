"""The lowering stage's one entry, as sqlglot's `optimizer.optimize` is its optimizer's: a
planned query (qualified and type-annotated) → the Spark SQL that runs it with
PostgreSQL's semantics, and the Spark SQL of the queries yielding its evaluation errors.

`name_relations` and `check_evaluation` run once, on the whole query: the latter splits
it into the query Spark runs and its errors queries. Each of these then goes through
`RULES` in order and is written as Spark SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from sluice.lower.check_evaluation import check_evaluation
from sluice.lower.compare_jsonb import compare_jsonb
from sluice.lower.compare_literals_as_text import compare_literals_as_text
from sluice.lower.empty_in_lists import empty_in_lists
from sluice.lower.fusion import Fusion
from sluice.lower.name_relations import name_relations
from sluice.lower.null_aware_in import null_aware_in
from sluice.lower.record_is_null import record_is_null
from sluice.lower.record_text import record_text
from sluice.lower.rewrite_jsonb_operators import rewrite_jsonb_operators
from sluice.lower.scale_numeric_casts import scale_numeric_casts

Rule = Callable[[exp.Expr], exp.Expr]

RULES: tuple[Rule, ...] = (
    # Records first, while their fields have types for the rules after them.
    record_is_null,
    record_text,
    # jsonb comparisons first, while the jsonb operators still have their types.
    compare_jsonb,
    rewrite_jsonb_operators,
    scale_numeric_casts,
    compare_literals_as_text,
    null_aware_in,
    empty_in_lists,
)


@dataclass(frozen=True)
class Lowered:
    """A query as Spark SQL (`sql`) and the Spark SQL of its errors queries (`errors`,
    each with one column `message`). Fused, `flags[i]` names the hidden boolean column of
    the query's rows saying whether `errors[i]` has rows (None: only that query knows),
    and `carried` the input flag columns its rows carry on (see `fusion`)."""

    sql: str
    errors: list[str]
    flags: list[str | None]
    carried: list[str]


def lower(query: exp.Expr, relations: dict[str, str], fusion: Fusion | None = None) -> Lowered:
    """`query` (left unchanged) lowered, the relations it reads named as `relations` says
    (`name_relations`)."""
    checked = check_evaluation(name_relations(query.copy(), relations), fusion)
    errors = [spark_sql(e) for e in checked.errors]
    return Lowered(spark_sql(checked.query), errors, checked.flags, checked.carried)


def spark_sql(query: exp.Expr, rules: Sequence[Rule] = RULES) -> str:
    """A copy of `query` through `rules` in order, as Spark SQL."""
    query = query.copy()
    for rule in rules:
        query = rule(query)
    # Every name quoted: a PostgreSQL name may be a keyword to Spark (`semi`, `anti`).
    return query.sql(dialect="spark", identify=True)
