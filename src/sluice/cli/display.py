"""How results are shown, psql's way: aligned tables or expanded records (`\\x`), unaligned
(`-A`) and CSV (`--csv`) text for scripts, tuples only (`-t`), and the pager for what does
not fit the terminal (`\\pset pager`): `$PSQL_PAGER`, else `$PAGER` (either set empty: no
pager), else `less -S -X`. Text that fits the screen once wrapped is printed as it is, as
`less -F` would, and `-X` leaves what was paged on the screen after quitting the pager
(no alternate screen): the answer stays above the next prompt. (Not `-F` itself: with
`-S`, a few lines too wide would fit chopped, and less would quit at once with their ends
cut off and out of reach.)"""

from __future__ import annotations

import csv
import io
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from sluice.cli.table import cells, format_table, pad, row_count, with_notice
from sluice.values import pg_text

EXPANDED_CHOICES = ("on", "off", "auto")
DEFAULT_PAGER = "less -S -X"


@dataclass
class Display:
    expanded: str = "off"  # on | off | auto: auto expands a table wider than the terminal
    format: str = "aligned"  # aligned | unaligned | csv
    tuples_only: bool = False  # rows alone: no header, no row count
    pager: bool = True
    field_separator: str = "|"

    @property
    def for_scripts(self) -> bool:
        """Whether the output is meant for a program: CSV, unaligned or rows only."""
        return self.format != "aligned" or self.tuples_only

    def result(self, result, width: int | None = None) -> str:
        """A `Result` as text: its rows in this display's form, or its command tag (which
        tuples-only and CSV output leave out, as psql does); then any notice."""
        if not result.columns:
            shown = "" if self.tuples_only or self.format == "csv" else result.status
            return with_notice(shown, result)
        return with_notice(self.rows(result.columns, result.rows, width), result)

    def rows(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int | None = None) -> str:
        if self.format == "csv":
            return csv_text(columns, rows, header=not self.tuples_only)
        if self.format == "unaligned":
            return self._unaligned(columns, rows)
        table = format_table(columns, rows, footer=not self.tuples_only, header=not self.tuples_only)
        wide = width is not None and max(map(cells, table.splitlines()), default=0) > width
        if self.expanded == "on" or (self.expanded == "auto" and wide):
            return expanded_text(columns, rows, footer=not self.tuples_only)
        return table

    def _unaligned(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
        lines = [] if self.tuples_only else [self.field_separator.join(columns)]
        lines += [self.field_separator.join(pg_text(v) for v in row) for row in rows]
        if not self.tuples_only:
            lines.append(row_count(len(rows)))
        return "\n".join(lines)


def csv_text(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, header: bool = True) -> str:
    """RFC 4180 lines, as `psql --csv` writes them: NULL is an empty field, and a field is
    quoted only when it must be."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow(columns)
    writer.writerows([["" if v is None else pg_text(v) for v in row] for row in rows])
    return out.getvalue().removesuffix("\n")


def expanded_text(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, footer: bool = True) -> str:
    """One `-[ RECORD n ]-` block per row, a `name | value` line per column."""
    if not rows:
        return "(0 rows)" if footer else ""
    name_width = max(map(cells, columns), default=0)
    texts = [[pg_text(v) for v in row] for row in rows]
    value_width = max((cells(t) for row in texts for t in row), default=0)
    lines = []
    for n, row in enumerate(texts, 1):
        lines.append(_record_rule(n, name_width, value_width))
        lines += [f"{pad(name, name_width)} | {value}" for name, value in zip(columns, row)]
    return "\n".join(lines)


def _record_rule(n: int, name_width: int, value_width: int) -> str:
    """`-[ RECORD n ]` over the record, `+` above the column rule when the label leaves
    room for it, as psql draws it."""
    label = f"-[ RECORD {n} ]"
    rule = "-" * (name_width + 1) + "+" + "-" * (value_width + 1)
    return label + rule[len(label):]


def page(text: str, out: TextIO, *, enabled: bool) -> None:
    """Write `text` (plus a newline) to `out`, through the pager when `out` is a terminal,
    paging is on, there is a pager and the text does not fit the terminal."""
    command = pager_command()
    if enabled and command and out.isatty() and _exceeds(text, shutil.get_terminal_size()):
        out.flush()
        try:
            pager = subprocess.Popen(command, stdin=subprocess.PIPE, text=True)
        except OSError:
            pass  # no such pager: the text goes to the terminal as it is
        else:
            try:
                pager.communicate(text + "\n")
            except (BrokenPipeError, KeyboardInterrupt):
                pager.wait()  # the user left the pager early
            return
    out.write(text + "\n")
    out.flush()


def pager_command() -> list[str]:
    """The pager as psql chooses it: `$PSQL_PAGER`, else `$PAGER`, else the default; none
    when the variable chosen is empty."""
    for variable in ("PSQL_PAGER", "PAGER"):
        if variable in os.environ:
            return shlex.split(os.environ[variable])
    return shlex.split(DEFAULT_PAGER)


def _exceeds(text: str, size: os.terminal_size) -> bool:
    """Whether `text` takes more rows of the terminal than it has, its lines wrapped at its
    width (the prompt takes a row after the output, as in psql)."""
    width = max(size.columns, 1)
    rows = sum(max(1, -(-cells(line) // width)) for line in text.splitlines())
    return rows >= size.lines
