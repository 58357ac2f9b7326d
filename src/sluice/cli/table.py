"""psql-style output: result tables (centred headers, numbers right-aligned, a row count)
with values in PostgreSQL's text form, and the text a statement's result shows as.
Widths are display cells (`wcwidth`): a CJK character takes two, a combining mark none."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from wcwidth import wcswidth

from sluice.values import pg_text


def cells(text: str) -> int:
    """How many terminal columns `text` takes after a space, where a table puts every value
    (a control character counts as one). Measured after the space because a mark that begins
    `text` joins the character before it and widens it: wcwidth counts it only in context."""
    width = wcswidth(" " + text)
    return width - 1 if width >= 0 else sum(max(wcswidth(c), 1) for c in text)


def pad(text: str, width: int, how: str = "left") -> str:
    """`text` padded with spaces to `width` cells: `left`-aligned, `right` or `center`."""
    missing = max(width - cells(text), 0)
    if how == "right":
        return " " * missing + text
    if how == "center":  # str.center's choice of side for an odd gap, as before wcwidth
        return text.center(len(text) + missing)
    return text + " " * missing


def row_count(n: int) -> str:
    return f"({n} row{'' if n == 1 else 's'})"


def format_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, footer: bool = True, header: bool = True
) -> str:
    cells_text = [[pg_text(v) for v in row] for row in rows]
    widths = [
        max([cells(name), *(cells(row[i]) for row in cells_text)]) for i, name in enumerate(columns)
    ]
    lines = []
    if header:
        lines += [
            " " + " | ".join(pad(name, w, "center") for name, w in zip(columns, widths)),
            "-" + "-+-".join("-" * w for w in widths) + "-",
        ]
    numeric = [_numeric([row[i] for row in rows if row[i] is not None]) for i in range(len(columns))]
    lines += [
        " " + " | ".join(pad(c, w, "right" if num else "left") for c, w, num in zip(row, widths, numeric))
        for row in cells_text
    ]
    if footer:
        lines.append(row_count(len(rows)))
    return "\n".join(lines)


def _numeric(values: list) -> bool:
    return bool(values) and all(
        isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values
    )


def result_text(result) -> str:
    """What a `Result` shows as: its table, or its command tag; then any notice."""
    text = format_table(result.columns, result.rows) if result.columns else result.status
    return with_notice(text, result)


def with_notice(text: str, result) -> str:
    return text if not result.notice else f"{text}\nNOTICE:  {result.notice}"
