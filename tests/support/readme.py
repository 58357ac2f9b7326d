"""README.md read as tests/test_readme.py and bench/first_answer.py read it: its fenced
blocks (language, text), and the quick start — its shell commands and the exchanges its
REPL transcript shows."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```$", README, re.DOTALL | re.MULTILINE)


def quick_start() -> tuple[list[str], list[tuple[str, str]]]:
    """The quick start's three shell commands, and what it types at the REPL with what
    the README shows it answers."""
    lang, text = next((lang, text) for lang, text in BLOCKS if lang == "sh" and "kafka serve" in text)
    commands = [line for line in text.splitlines() if line.strip()]
    transcript = BLOCKS[[t for _, t in BLOCKS].index(text) + 1][1]
    exchanges, typed, answer = [], [], []
    for line in transcript.splitlines():
        prompt = re.match(r"sluice[=-]> ?(.*)", line)
        if prompt is not None:
            if answer:
                exchanges.append(("\n".join(typed), "\n".join(answer)))
                typed, answer = [], []
            typed.append(prompt.group(1))
        else:
            answer.append(line)
    exchanges.append(("\n".join(typed), "\n".join(answer)))
    return commands, exchanges
