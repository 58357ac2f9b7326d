"""The shell's loop, behind `sluice repl` (and `sluice` alone): `main` opens the session
(and the embedded Kafka broker unless one is named), prints the banner, then reads from a
terminal — a prompt_toolkit prompt with line editing, history that never holds a secret,
pygments highlighting and completion — or, when input is not a terminal, from its lines,
handing each runnable unit to the `Repl`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path

from sluice import redact_secrets
from sluice.cli import repl_kafka
from sluice.cli.broker import embedded_broker, version
from sluice.cli.display import Display
from sluice.cli.interrupt import Cancelled
from sluice.cli.repl import Repl
from sluice.cli.repl_input import Accumulator, candidates, is_complete
from sluice.errors import SqlError, format_error
from sluice.session import Session

PROMPT = "sluice=> "
CONTINUATION = "sluice-> "
DEFAULT_HISTORY = Path.home() / ".sluice_history"


def _prompt_session(repl: Repl, history_file: Path):
    from prompt_toolkit import PromptSession
    from prompt_toolkit.application import get_app
    from prompt_toolkit.completion import Completer, Completion
    from prompt_toolkit.filters import Condition
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.lexers import PygmentsLexer
    from pygments.lexers.sql import PostgresLexer

    class RedactingHistory(FileHistory):
        """The history file never holds a secret's value."""

        def store_string(self, string: str) -> None:
            super().store_string(redact_secrets(string))

    class SqlCompleter(Completer):
        def get_completions(self, document, complete_event):
            names = repl.session.names()
            word, found = candidates(
                document.text_before_cursor, names, repl.session.relation_columns(), document.text
            )
            for candidate in found:
                yield Completion(candidate, start_position=-len(word))

    history_file.parent.mkdir(parents=True, exist_ok=True)
    return PromptSession(
        PROMPT,
        multiline=Condition(lambda: not is_complete(get_app().current_buffer.text)),
        prompt_continuation=lambda width, line_number, soft_wrap: CONTINUATION.rjust(width),
        history=RedactingHistory(str(history_file)),
        lexer=PygmentsLexer(PostgresLexer),
        completer=SqlCompleter(),
        complete_while_typing=False,
        enable_history_search=False,
    )


def interact(repl: Repl, history_file: Path) -> None:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.application import run_in_terminal

    prompt = _prompt_session(repl, history_file)

    def first_render(app) -> None:
        # The background work competes for the interpreter: let the prompt show first.
        prompt.app.after_render -= first_render
        repl.start_background()

    prompt.app.after_render += first_render

    def spark_ready() -> None:  # on the thread that started Spark
        app, loop = prompt.app, prompt.app.loop
        if app.is_running and loop is not None and repl.spark_ui_untold():
            # Printed above the prompt being edited; if the prompt is gone by then, the
            # next one (or the statement waiting for Spark) prints it.
            loop.call_soon_threadsafe(lambda: run_in_terminal(repl.tell_spark_ui) if app.is_running else None)

    repl.spark.on_ready = spark_ready
    # A prompt of its own: arguments given to a PromptSession's prompt() stay with it.
    data_prompt: PromptSession[str] = PromptSession(repl_kafka.PRODUCE_PROMPT)
    repl.read_data = lambda: _data_line(data_prompt)
    while True:
        try:
            repl.tell_spark_ui()
            text = prompt.prompt()
        except KeyboardInterrupt:
            continue
        except EOFError:
            return
        try:
            if not repl.handle(text):
                return
        except KeyboardInterrupt:  # a Ctrl-C while an error was being shown: the session goes on
            repl.write("cancelled")


def _data_line(prompt) -> str | None:
    """A line of `\\produce`'s data from the terminal; None at Ctrl-D."""
    try:
        return prompt.prompt()
    except EOFError:
        return None
    except KeyboardInterrupt:
        raise Cancelled from None


def read_lines(repl: Repl, lines: Iterable[str]) -> None:
    """Input that is not a terminal: the same statements and meta-commands, no prompt."""
    pending = Accumulator()
    lines = iter(lines)
    repl.read_data = lambda: next(lines, None)
    for line in lines:
        unit = pending.feed(line.rstrip("\n"))
        if unit is not None and not repl.handle(unit):
            return
    if pending.pending.strip():
        repl.handle(pending.pending)


def main(
    data_dir: str | None,
    broker: str | None,
    master: str | None,
    history_file: str | None,
    *,
    spark_conf: Sequence[tuple[str, str]] = (),
    spark_ui: bool = False,
    display: Display | None = None,
) -> int:
    if master:
        os.environ["SLUICE_SPARK_MASTER"] = master
    embedded = broker is None
    kafka = ExitStack()  # the embedded broker, if one is started
    try:
        if broker is None:
            broker = kafka.enter_context(embedded_broker()).bootstrap
        session = Session(data_dir, spark_conf=spark_conf, spark_ui=spark_ui)
    except SqlError as e:
        print(format_error(e), file=sys.stderr)
        kafka.close()
        return 1
    interactive = sys.stdin.isatty()
    with session:
        repl = Repl(session, broker, embedded=embedded, display=display)
        for line in repl.banner_lines(version(), spark_now=interactive):
            repl.note(line)
        for notice in session.notices:
            repl.note(f"WARNING:  {notice}")
        try:
            if interactive:
                interact(repl, Path(history_file) if history_file else DEFAULT_HISTORY)
            else:
                # Piped input may never need Spark; start it only if a statement does.
                repl.start_background(spark_now=False)
                read_lines(repl, sys.stdin)
        finally:
            kafka.close()
    return 1 if repl.failed and not interactive else 0
