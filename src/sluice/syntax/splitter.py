"""Cutting a script into statements at top-level semicolons.

Semicolons inside string literals, quoted identifiers, dollar-quoted strings and comments
do not end a statement. Each piece keeps its absolute offset so that errors point into the
whole script. The same scan finds a literal or comment left open at the end of the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Each quoted construct captures its closing delimiter; a construct that ran to the end of
# the text without one is unterminated.
_SCAN = re.compile(
    r"""
      (?<![\w$])[eE]'(?:[^'\\]|\\.|'')*(?:(?P<estring>')|\Z)
    | '(?:[^']|'')*(?:(?P<string>')|\Z)
    | "(?:[^"]|"")*(?:(?P<identifier>")|\Z)
    | (?<![\w$])\$(?P<tag>[A-Za-z_]\w*)?\$.*?(?:(?P<dollar>(?(tag)\$(?P=tag)\$|\$\$))|\Z)
    | /\*.*?(?:(?P<comment>\*/)|\Z)
    | --[^\n]*
    | ;
    """,
    re.VERBOSE | re.DOTALL,
)
_CLOSERS = {
    "'": ("string", "unterminated quoted string"),
    "e": ("estring", "unterminated quoted string"),
    "E": ("estring", "unterminated quoted string"),
    '"': ("identifier", "unterminated quoted identifier"),
    "$": ("dollar", "unterminated dollar-quoted string"),
    "/": ("comment", "unterminated multiline comment"),
}
_BLANK = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*+", re.DOTALL)


def split_statements(text: str) -> Iterator[tuple[int, int]]:
    """Yield `(start, end)` of each non-blank statement in `text`, without its semicolon."""
    start = 0
    for match in _SCAN.finditer(text):
        if match.group() == ";":
            if not _BLANK.fullmatch(text, start, match.start()):
                yield start, match.start()
            start = match.end()
    if not _BLANK.fullmatch(text, start):
        yield start, len(text)


def find_unterminated(text: str) -> tuple[int, str] | None:
    """`(offset, message)` of a literal or comment in `text` that is never closed."""
    for match in _SCAN.finditer(text):
        closer = _CLOSERS.get(match.group()[0])
        if closer is not None and match.group(closer[0]) is None and match.end() == len(text):
            return match.start(), closer[1]
    return None
