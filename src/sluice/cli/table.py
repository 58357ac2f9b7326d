"""psql-style output: result tables (centred headers, numbers right-aligned, a row count)
with values in PostgreSQL's text form, and the text a statement's result shows as."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from sluice.values import pg_text


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[pg_text(v) for v in row] for row in rows]
    widths = [
        max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(columns)
    ]
    lines = [
        " " + " | ".join(name.center(w) for name, w in zip(columns, widths)),
        "-" + "-+-".join("-" * w for w in widths) + "-",
    ]
    numeric = [_numeric([row[i] for row in rows if row[i] is not None]) for i in range(len(columns))]
    lines += [
        " " + " | ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric))
        for row in cells
    ]
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines)


def _numeric(values: list) -> bool:
    return bool(values) and all(
        isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values
    )


def result_text(result) -> str:
    """What a `Result` shows as: its table, or its command tag; then any notice."""
    text = format_table(result.columns, result.rows) if result.columns else result.status
    return text if not result.notice else f"{text}\nNOTICE:  {result.notice}"
