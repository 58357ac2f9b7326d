"""How a recorded program is laid out as lines of Python: a statement with its method chain
one call a line, comments, Spark SQL as a triple-quoted string, and any line wrapped at a
width where Python lets it break (`wrapped`).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator

from sluice.spark.pyspark_expr import literal


class Return(enum.Enum):
    """The target of a function's `return` statement; a statement's target is otherwise
    the variable it assigns, or None."""

    RETURN = "return"


RETURN = Return.RETURN


def comment_lines(comment: str | None) -> list[str]:
    """`comment`, if any, as comment lines."""
    return [] if comment is None else [f"# {line}" for line in comment.split("\n")]


def statement_lines(target: str | Return | None, text: str) -> list[str]:
    """`target = text` with a method chain one call a line, as PySpark is written."""
    calls = _split_chain(text)
    head = "return " if target is RETURN else f"{target} = " if target is not None else ""
    if len(calls) <= 2 and len(head) + len(text) <= 100:
        return [head + text]
    return [f"{head}(", *(f"    {c}" for c in calls), ")"]


def _split_chain(text: str) -> list[str]:
    """`a.b(…).c(…)` → [`a.b(…)`, `.c(…)`], split only at the top level."""
    calls, start = [], 0
    for i, ch, depth in _code(text):
        if ch == "." and depth == 0 and i > start and text[i - 1] == ")":
            calls.append(text[start:i])
            start = i
    calls.append(text[start:])
    return calls


def _code(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth before it) of each character of a line of Python
    outside its string literals."""
    depth, quote, i = 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if text.startswith(quote, i) and text[i - 1] != "\\":
                i += len(quote) - 1
                quote = None
        elif text.startswith('"""', i):
            quote = '"""'
            i += 2
        elif ch in "\"'":
            quote = ch
        else:
            yield i, ch, depth
            depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        i += 1


def wrapped(line: str, width: int) -> list[str]:
    """A line of the program as lines of at most `width` characters where Python lets it
    break: a comment at its spaces, code inside its largest outermost brackets, one
    argument a line (a string literal longer than `width` stays whole)."""
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    if line.lstrip().startswith("#"):
        words = line.lstrip()[2:].split(" ")
        out = [f"{indent}#"]
        for word in words:
            if len(out[-1]) + 1 + len(word) > width and out[-1] != f"{indent}#":
                out.append(f"{indent}#")
            out[-1] += " " + word
        return out
    groups = _outermost_groups(line)
    if not groups:
        return [line]
    # The largest group that opens within the width (a later one is split in what follows it).
    fitting = [g for g in groups if g[0] < width] or groups[:1]
    opening, closing, commas = max(fitting, key=lambda g: g[1] - g[0])
    if closing - opening <= 1:
        return [line]
    bounds = [opening, *commas, closing]
    items = [line[a + 1 : b].strip() for a, b in itertools.pairwise(bounds)]
    inner = indent + "    "
    out = [line[: opening + 1]]
    for n, item in enumerate(items):
        out += wrapped(inner + item + ("," if n < len(items) - 1 else ""), width)
    return out + wrapped(indent + line[closing:], width)


def _outermost_groups(line: str) -> list[tuple[int, int, list[int]]]:
    """(opening, closing, commas inside) of each bracket pair at the line's outermost level."""
    groups: list[tuple[int, int, list[int]]] = []
    stack: list[tuple[int, list[int] | None]] = []  # open brackets; commas of the outermost
    lowest = 0
    for i, ch, depth in _code(line):
        if ch in "([{":
            if depth <= lowest:
                lowest = depth
                stack = [(i, [])]
            elif stack:
                stack.append((i, None))
        elif ch in ")]}":
            lowest = min(lowest, depth - 1)
            if stack:
                opening, commas = stack.pop()
                if commas is not None:
                    groups.append((opening, i, commas))
        elif ch == "," and len(stack) == 1 and stack[0][1] is not None:
            stack[0][1].append(i)
    return groups


def sql_literal(text: str) -> str:
    """Spark SQL text as a triple-quoted string where it can be one, else a plain literal."""
    if '"""' not in text and "\\" not in text and not text.endswith('"'):
        return f'"""{text}"""'
    return literal(text)
