"""The one place a dataflow's timelines are computed and checked (DESIGN §5).

SELECT, CREATE [MATERIALIZED] VIEW, SUBSCRIBE, CREATE SINK and EXPLAIN all call
`single_timeline`; it walks views and materialized views down to the sources and tables
they read, so no path can build a dataflow that mixes timelines.
"""

from __future__ import annotations

from collections.abc import Iterable

from sluice.catalog import items as kinds
from sluice.catalog.store import Catalog
from sluice.catalog.timeline import EPOCH_MS, Timeline
from sluice.errors import FeatureNotSupported, Span

_DERIVED = (kinds.VIEW, kinds.MATERIALIZED_VIEW, kinds.SINK)


def timelines(catalog: Catalog, item_ids: Iterable[str]) -> set[Timeline]:
    """Every timeline the items reach; constants (no items) reach none."""
    found: set[Timeline] = set()
    seen: set[str] = set()
    stack = list(item_ids)
    while stack:
        item_id = stack.pop()
        if item_id in seen:
            continue
        seen.add(item_id)
        item = catalog.by_id(item_id)
        if item.kind in _DERIVED:
            stack.extend(
                d for d in item.depends_on if catalog.by_id(d).kind in (*kinds.RELATIONS,)
            )
        elif item.kind == kinds.TABLE:
            found.add(EPOCH_MS)
        elif item.timeline is not None:
            found.add(item.timeline)
    return found


def single_timeline(catalog: Catalog, item_ids: Iterable[str], span: Span | None) -> Timeline | None:
    """The dataflow's one timeline (None for constants), or the multiple-timelines error."""
    found = timelines(catalog, item_ids)
    if len(found) > 1:
        raise FeatureNotSupported(
            "multiple timelines within one dataflow are not supported",
            span=span,
            detail="the dataflow reads " + ", ".join(sorted(str(t) for t in found)),
        )
    return next(iter(found), None)
