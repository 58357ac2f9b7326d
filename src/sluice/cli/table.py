"""psql-style result tables: centred headers, numbers right-aligned, a row count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.values import value_text


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[value_text(v) for v in row] for row in rows]
    widths = [
        max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(columns)
    ]
    lines = [
        " " + " | ".join(name.center(w) for name, w in zip(columns, widths)),
        "-" + "-+-".join("-" * w for w in widths) + "-",
    ]
    numeric = [
        all(
            row[i] is None or (isinstance(row[i], (int, float)) and not isinstance(row[i], bool))
            for row in rows
        )
        for i in range(len(columns))
    ]
    lines += [
        " " + " | ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric))
        for row in cells
    ]
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines)
