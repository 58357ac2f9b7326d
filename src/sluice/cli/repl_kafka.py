"""The REPL's Kafka meta-commands: `\\topics`, and `\\produce TOPIC [options]`, which takes
the options of `sluice kafka produce` and then one message per line until `\\.` on a line
of its own (or the end of input), as psql's `COPY … FROM STDIN` does."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable

from sluice.cli.kafka import produce_lines, produce_options, topics_table
from sluice.errors import InvalidParameterValue, SqlError

END_OF_DATA = "\\."
PRODUCE_PROMPT = ">> "
PRODUCE_HELP = ("Enter messages, one per line (KEY SEP VALUE with -K SEP). End with a backslash "
                "and a period on a line by itself, or an EOF signal.")
USAGE = {
    "produce": ("\\produce TOPIC …", "write the lines that follow, up to \\., to TOPIC (-K SEP, --create, …)"),
    "topics": ("\\topics", "list the Kafka topics and their partitions"),
}


class _OptionParser(argparse.ArgumentParser):
    """Option errors as SqlErrors, never an exit."""

    def error(self, message: str):
        raise InvalidParameterValue(f"\\produce: {message}", hint=self.format_usage().strip())


_PRODUCE = produce_options(_OptionParser(prog="\\produce", add_help=False))


def produce(
    broker: str,
    argument: str,
    read_line: Callable[[], str | None],
    write: Callable[[str], None],
    *,
    interactive: bool,
) -> None:
    """`\\produce`: parse `argument`, read the messages with `read_line` (None at the end of
    input) and write them to `broker`; `PRODUCE n` when done."""
    try:
        options = _PRODUCE.parse_args(shlex.split(argument))
        refused = None
    except (SqlError, ValueError) as e:  # ValueError: shlex's unbalanced quotes
        if interactive:
            raise _as_option_error(e) from None
        refused = e  # the lines that follow are still this command's: read them first
    if interactive:
        write(PRODUCE_HELP)
    lines = []
    while (line := read_line()) is not None and line.strip() != END_OF_DATA:
        lines.append(line)
    if refused is not None:
        raise _as_option_error(refused)
    count = produce_lines(broker, options, lines)
    write(f"PRODUCE {count}")


def _as_option_error(error: Exception) -> SqlError:
    return error if isinstance(error, SqlError) else InvalidParameterValue(f"\\produce: {error}")


def topics(broker: str, write: Callable[[str], None]) -> None:
    """`\\topics`: the topics of `broker` and their partition counts."""
    write(topics_table(broker))
