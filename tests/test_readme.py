"""README.md stays true to what it shows: every `sluice …` command it writes (in a shell
block, a table or a sentence) names a command the `sluice` parser has and flags that
command takes, and every shell block's command line parses whole; `./dev` commands exist;
Python blocks compile, and the first using `sluice` alone prints what the README shows after it; the SQL
typed at the REPL's prompt in its transcripts parses. Then (long tier) the quick start run
for real: its three commands, in three processes, answer as the README shows."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

import sluice
from sluice.cli.kafka import kafka_argv
from sluice.cli.main import build_parser
from tests.support.readme import BLOCKS, README, ROOT, quick_start
from tests.support.terminal import environment, quitting

SHELL = [line for lang, text in BLOCKS if lang == "sh" for line in text.splitlines() if line.strip()]
# Every code span or shell-block command that starts with `sluice` (or `.venv/bin/sluice`).
MENTIONED = sorted(
    {span for span in re.findall(r"`([^`\n]+)`", README) if re.match(r"(\.venv/bin/)?sluice( |$)", span)}
    | {part.strip() for line in SHELL for part in line.split("|") if "sluice" in part.split()[0]}
)


def argv_of(command: str) -> list[str]:
    """A command as `sluice`'s main sees its arguments (`sluice` alone, or with the
    shell's flags, is `sluice repl`)."""
    words = shlex.split(command.replace("\\|", "|"))
    words = [w for w in words[1:] if w != "<"]
    if not words or (words[0].startswith("-") and words[0] not in ("-h", "--help", "--version")):
        words = ["repl", *words]
    return kafka_argv(words)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_readme_names_its_commands() -> None:
    assert any(line.startswith(".venv/bin/sluice kafka serve") for line in SHELL)
    assert len(MENTIONED) > 15, MENTIONED


@pytest.mark.parametrize("command", MENTIONED)
def test_each_sluice_command_the_readme_names_exists_with_its_flags(command: str) -> None:
    """A synopsis (`[--port P]`, `T[:N] …`) or a sentence's command: its subcommands exist
    and every flag it names is one of the subcommand's."""
    words = argv_of(re.sub(r"[\[\]…]", " ", command.split(" < ")[0]))
    parser = build_parser()
    for word in words:
        choices = subcommands(parser)
        if word in choices:
            parser = choices[word]
        elif word.startswith("-"):
            # `-At` is `-A -t`, as argparse (and psql) read single-letter flags run together.
            flags = [word] if word.startswith("--") or len(word) == 2 else [f"-{c}" for c in word[1:]]
            for flag in flags:
                assert flag in parser._option_string_actions, f"{command}: {parser.prog} has no flag {flag}"
    assert not subcommands(parser) or words == ["--version"], f"{command}: names no command"


@pytest.mark.parametrize("line", SHELL)
def test_each_shell_block_command_parses_whole(line: str) -> None:
    for part in (p.strip() for p in line.split("|")):
        program = part.split()[0]
        if program.endswith("sluice"):
            with contextlib.redirect_stderr(io.StringIO()) as said:
                try:
                    build_parser().parse_args(argv_of(part.split("#")[0]))
                except SystemExit:
                    pytest.fail(f"{part}: {said.getvalue()}")
        elif program == "./dev":
            command = part.split()[1]
            assert re.search(rf"^\s+{command}\)$", (ROOT / "dev").read_text(), re.MULTILINE), part
        else:
            assert program in ("printf", "psql"), part  # the only other programs the README runs


def test_python_blocks_compile_and_the_first_prints_what_follows_it() -> None:
    python = [text for lang, text in BLOCKS if lang == "python"]
    assert python
    for text in python:
        compile(text, "README.md", "exec")
    # The first that needs no server (a driver's example needs `sluice serve` running).
    embedded = next(text for text in python if text.startswith("import sluice"))
    shown = BLOCKS[[text for _, text in BLOCKS].index(embedded) + 1][1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(embedded, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    assert shown in out.getvalue()


def typed_statements() -> list[str]:
    """The SQL typed at the prompt in the README's REPL transcripts, a statement each."""
    statements, pending = [], []
    for lang, text in BLOCKS:
        for line in text.splitlines():
            typed = re.match(r"sluice[=-]> ?(.*)", line)
            if typed is not None:
                pending.append(typed.group(1))
                if typed.group(1).rstrip().endswith(";"):
                    statements.append("\n".join(pending))
                    pending = []
    return statements


def test_the_sql_typed_in_the_readme_transcripts_parses() -> None:
    statements = typed_statements()
    assert len(statements) >= 4, statements
    for text in statements:
        assert len(sluice.parse(text)) == 1, text


@pytest.mark.spark  # the REPL it runs starts Spark
@pytest.mark.long  # three processes and Spark's start: a minute or two on two loaded cores
def test_the_quick_start_answers_as_the_readme_shows(tmp_path: Path) -> None:
    commands, exchanges = quick_start()
    assert len(commands) == 3 and [typed for typed, _ in exchanges][1:] == [
        "SELECT key, data FROM orders;", "SELECT error FROM orders_dlq;"
    ]
    port = 9092
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            pytest.skip("port 9092, which the README's commands use, is taken")
    env = environment()
    env.pop("SLUICE_BROKER", None)

    def sluice_argv(command: str) -> list[str]:
        return [sys.executable, "-m", "sluice", *shlex.split(command)[1:]]

    server = subprocess.Popen(sluice_argv(commands[0]), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == f"kafka listening on 127.0.0.1:{port}"
        printf, produce = commands[1].split(" | ")
        lines = shlex.split(printf)[1].encode().decode("unicode_escape")
        subprocess.run(sluice_argv(produce), input=lines, env=env, check=True, text=True, timeout=120)
        child = pexpect.spawn(
            sys.executable, sluice_argv(commands[2])[1:] + ["--history-file", str(tmp_path / "history")],
            env=env, encoding="utf-8", timeout=60, dimensions=(50, 400),
        )
        with quitting(child) as term:
            for typed, answer in exchanges:
                shown = term.run(typed, timeout=600)
                # Trailing blanks aside (an aligned table pads its last column).
                shown = "\n".join(line.rstrip() for line in shown.splitlines() if not line.startswith("Spark is ready"))
                if typed.startswith("SELECT error"):  # the README narrows its table
                    assert answer.splitlines()[2].strip() == shown.splitlines()[2].strip(), shown
                else:
                    assert shown == answer, shown
    finally:
        server.terminate()
        server.wait(timeout=60)
