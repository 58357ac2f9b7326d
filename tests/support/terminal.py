"""Driving sluice's processes as a user does, for tests and bench/first_answer.py: the
REPL in a pexpect pseudo-terminal (`spawn_repl`, a `Terminal` reading one input's output
at a time, `quitting` it at the end) in an environment importing this checkout's sources,
and a free local port for a listener a child opens."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect

SRC = Path(__file__).resolve().parents[2] / "src"

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")
# prompt_toolkit turns bracketed paste on when a prompt starts and off when Enter accepts
# the input, so what lies between those two marks is exactly the output of that input.
PROMPT_ENDED = "\x1b[?2004l"
PROMPT_STARTED = "\x1b[?2004h"


def cancelled(output: str) -> bool:
    """Whether the output ends in the REPL's word for Ctrl-C (after the terminal's `^C`)."""
    return re.fullmatch(r"(\^C)?cancelled", output.splitlines()[-1]) is not None


class Terminal:
    """The REPL's side of a pexpect pseudo-terminal, one input and its output at a time."""

    def __init__(self, child) -> None:
        self.child = child
        self.progress: list[str] = []  # the progress lines drawn, in order

    @staticmethod
    def without_progress(text: str) -> tuple[str, list[str]]:
        """`text` as a terminal leaves it, without the progress line's redraws (each
        starts with a carriage return, and what follows the last one of a line is what
        the line shows), and the progress lines drawn."""
        shown, drawn = [], []
        for line in text.split("\n"):
            *overwritten, last = line.split("\r")
            drawn += [part for part in overwritten if part]
            shown.append(last)
        return "\n".join(shown), drawn

    def type(self, text: str) -> None:
        """Type `text`, pressing Enter for each newline and at the end."""
        self.child.send(text.replace("\n", "\r") + "\r")
        self.child.expect_exact(PROMPT_ENDED)

    def output(self, timeout: float = 180) -> str:
        """What was printed until the next prompt, without terminal control sequences."""
        self.child.expect_exact(PROMPT_STARTED, timeout=timeout)
        text = ANSI.sub("", self.child.before).replace("\r\n", "\n")
        text, drawn = self.without_progress(text)
        self.progress += drawn
        self.child.expect_exact("sluice=>")
        return text.strip("\n")

    def run(self, text: str, timeout: float = 180) -> str:
        self.type(text)
        return self.output(timeout)


def environment(**more: str) -> dict[str, str]:
    """The environment the REPL runs in under test: this checkout's sources, a terminal
    whose size is the pseudo-terminal's (`LINES` and `COLUMNS`, which a pytest-xdist
    worker sets, would override it)."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("LINES", "COLUMNS")},
        "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "TERM": "xterm",
        # pexpect's terminal answers no cursor-position requests; say so up front
        "PROMPT_TOOLKIT_NO_CPR": "1",
        **more,
    }


def spawn_repl(
    tmp_path: Path, *flags: str, env: dict[str, str] | None = None, dimensions=(50, 200)
) -> tuple[pexpect.spawn, str]:
    """`sluice repl` on a data directory under `tmp_path`, in a pseudo-terminal of
    `dimensions` (rows, columns), and its embedded broker's address once it says it."""
    child = pexpect.spawn(
        sys.executable,
        ["-m", "sluice.cli.main", "repl", "--data-dir", str(tmp_path / "data"),
         "--history-file", str(tmp_path / "history"), *flags],
        env=env or environment(),
        encoding="utf-8",
        timeout=60,
        dimensions=dimensions,
    )
    child.expect(r"embedded broker at (127\.0\.0\.1:\d+)")
    return child, child.match.group(1)


def raw_output(child: pexpect.spawn, timeout: float = 60) -> str:
    """What was written until the next prompt, control sequences included."""
    child.expect_exact(PROMPT_STARTED, timeout=timeout)
    raw = child.before
    child.expect_exact("sluice=>")
    return raw


@contextmanager
def quitting(child: pexpect.spawn, quit_timeout: float = 60) -> Iterator[Terminal]:
    """The shell `child` once its prompt shows, as a `Terminal`; left with `\\q`, which must
    end it, or killed if what ran in between failed."""
    try:
        child.expect_exact("sluice=>")
        yield Terminal(child)
        child.send("\\q\r")
        child.expect(pexpect.EOF, timeout=quit_timeout)
    finally:
        if child.isalive():
            child.terminate(force=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
