"""What the shell reads: when Enter runs the input (`is_complete`; `Accumulator` for input
that is not a terminal: a statement ends at a top-level `;`), the meta-command lines
(`META_COMMANDS`, their `HELP`, `parse_meta`), and what Tab completes (`candidates`:
meta-commands, catalog names, keywords, and column names where a column is likely).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sluice import KEYWORDS, find_unterminated, split_statements
from sluice.cli import repl_kafka

META_COMMANDS = {
    "d": ("\\d [NAME]", "list relations, or describe relation NAME"),
    "dt": ("\\dt", "list tables (dead-letter tables too)"),
    "dv": ("\\dv", "list views"),
    "dm": ("\\dm", "list materialized views"),
    "ds": ("\\ds", "list sources"),
    "x": ("\\x [on|off|auto]", "expanded display: a block per row (auto: when too wide)"),
    "pset": ("\\pset pager [on|off]", "page output that does not fit the terminal"),
    "timing": ("\\timing [on|off]", "toggle printing how long each statement took"),
    "i": ("\\i FILE", "run the statements in FILE"),
    "kafka": ("\\kafka", "show the Kafka broker address in use"),
    "log": ("\\log", "show the path of Spark's log"),
    "spark": ("\\spark", "show whether Spark runs, and its web UI's address"),
    **repl_kafka.USAGE,
    "?": ("\\?", "show this help"),
    "q": ("\\q", "quit (Ctrl-D too)"),
}
HELP = "\n".join(
    [f"  {usage:<21} {what}" for usage, what in META_COMMANDS.values()]
    + [
        "",
        "  SQL statements end with ';' and may span lines. Ctrl-C cancels a running",
        "  statement or ends a SUBSCRIBE; at the prompt it clears the line.",
    ]
)


# Query bodies are parsed by sqlglot, so the grammar's keywords lack most words of a query.
QUERY_WORDS = frozenset(
    """AND ASC BETWEEN CASE CAST CROSS DESC DISTINCT ELSE END EXCEPT FULL HAVING IGNORE INNER
    INTERSECT IS JOIN LEFT LIKE LIMIT ON ONLY OR ORDER OUTER RIGHT SET THEN UNION WHEN WHERE""".split()
)
COMPLETED_WORDS = KEYWORDS | QUERY_WORDS

_META = re.compile(r"\\(\S*)\s*(.*?)\s*", re.DOTALL)


def is_complete(text: str) -> bool:
    """Whether Enter should run `text`: a meta-command, nothing, or statements ended by `;`."""
    stripped = text.strip()
    if not stripped or stripped.startswith("\\"):
        return True
    if find_unterminated(text) is not None:
        return False
    pieces = list(split_statements(text))
    if not pieces:
        return True  # comments only: nothing to run
    end = pieces[-1][1]
    return end < len(text) and text[end] == ";"


class Accumulator:
    """Collects input lines into runnable units: a meta-command line, or a text whose
    statements are all ended by `;` (used where input is not a terminal)."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    @property
    def pending(self) -> str:
        return "\n".join(self._lines)

    def feed(self, line: str) -> str | None:
        """The unit `line` completes, if any."""
        if not self._lines and line.strip().startswith("\\"):
            return line.strip()
        self._lines.append(line)
        text = self.pending
        if not is_complete(text):
            return None
        self._lines = []
        return text if text.strip() else None


@dataclass(frozen=True)
class MetaCommand:
    name: str  # without the backslash
    argument: str


def parse_meta(line: str) -> MetaCommand:
    """`\\d  orders ` → MetaCommand("d", "orders")."""
    match = _META.fullmatch(line.strip())
    if match is None:
        raise ValueError(f"not a meta-command: {line!r}")
    return MetaCommand(match.group(1), match.group(2))


def candidates(
    text_before_cursor: str,
    names: Iterable[str],
    columns: Mapping[str, Sequence[str]] | None = None,
    text: str | None = None,
) -> tuple[str, list[str]]:
    """The word being completed and what it may become: meta-commands after a leading
    backslash, catalog names after `\\d`, otherwise catalog names and keywords (in the case
    the word is typed in) — after SELECT, WHERE and the like, column names first: those
    of the relations the statement (`text`, the whole input) reads, or all of `columns`
    (relation → its column names) when it names none yet."""
    meta = re.fullmatch(r"\s*(\\\S*)", text_before_cursor)
    if meta is not None:
        word = meta.group(1)
        return word, [f"\\{name}" for name in META_COMMANDS if f"\\{name}".startswith(word)]
    found = re.search(r"[\w$]*\Z", text_before_cursor)
    word = found.group() if found else ""
    argument_of = re.match(r"\s*\\(\S+)\s", text_before_cursor)
    if not word or (argument_of is not None and argument_of.group(1) != "d"):
        return word, []
    folded = word.lower()
    matching_names = sorted({n for n in names if n.lower().startswith(folded) and n != word})
    if argument_of is not None:
        return word, matching_names
    if columns and _wants_column(text_before_cursor[: len(text_before_cursor) - len(word)]):
        in_scope = _columns_in_scope(text if text is not None else text_before_cursor, columns)
        matching_columns = sorted({c for c in in_scope if c.lower().startswith(folded) and c != word})
        matching_names = matching_columns + [n for n in matching_names if n not in matching_columns]
    lower = word.islower()
    matching_keywords = sorted(
        (k.lower() if lower else k)
        for k in COMPLETED_WORDS
        if k.lower().startswith(folded) and k.lower() != folded
    )
    return word, matching_names + [k for k in matching_keywords if k not in matching_names]


# The last keyword before a word that makes it (likely) a column: SELECT a, WHERE a, …
_COLUMN_CONTEXT = re.compile(r"\b(SELECT|WHERE|AND|OR|ON|BY|HAVING|FROM|JOIN|INTO|UPDATE|TABLE)\b", re.IGNORECASE)
_READS = re.compile(r"\b(?:FROM|JOIN)\s+(?:IGNORE\s+ERRORS\s+|ONLY\s+ERRORS\s+)?([\w$]+)", re.IGNORECASE)


def _wants_column(before_word: str) -> bool:
    keywords = _COLUMN_CONTEXT.findall(before_word)
    return bool(keywords) and keywords[-1].upper() in ("SELECT", "WHERE", "AND", "OR", "ON", "BY", "HAVING")


def _columns_in_scope(text: str, columns: Mapping[str, Sequence[str]]) -> list[str]:
    read = [name for name in _READS.findall(text) if name in columns]
    return [c for name in (read or columns) for c in columns[name]]

