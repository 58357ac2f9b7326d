"""Golden files: records of `directive`, input lines, `----`, expected output, blank line.

`#` lines before a record are its comment and survive a rewrite. Expected output ends at
the first blank line, so outputs must not contain blank lines. Run pytest with
`--rewrite` to replace every expected output with the actual one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Record:
    directive: str
    input: str
    expected: str
    line: int  # 1-based line of the directive, for messages
    comment: list[str] = field(default_factory=list)


def read_records(path: Path) -> list[Record]:
    lines = path.read_text(encoding="utf-8").split("\n")
    records: list[Record] = []
    comment: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("#"):
            comment.append(line)
            continue
        if not line.strip():
            continue
        start = i
        body: list[str] = []
        while i < len(lines) and lines[i] != "----":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start}: record without ----")
        i += 1
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        records.append(Record(line, "\n".join(body), "\n".join(expected), start, comment))
        comment = []
    return records


def write_records(path: Path, records: list[Record]) -> None:
    text = "\n".join(
        "".join(f"{c}\n" for c in r.comment) + f"{r.directive}\n{r.input}\n----\n{r.expected}\n"
        for r in records
    )
    path.write_text(text, encoding="utf-8")


def check_records(path: Path, render: Callable[[Record], str], rewrite: bool) -> None:
    """Each record's expected output against `render`'s; with `rewrite`, replaced by it."""
    records = read_records(path)
    if rewrite:
        for r in records:
            r.expected = render(r)
        write_records(path, records)
        return
    failures = []
    for r in records:
        actual = render(r)
        if actual != r.expected:
            failures.append(f"{path.name}:{r.line}\n{r.input}\n--- expected\n{r.expected}\n--- actual\n{actual}")
    assert not failures, "\n\n".join(failures)
