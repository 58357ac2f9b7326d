"""`sluice repl` (and `sluice` alone): the interactive SQL shell.

This module owns the shell: reading statements (prompt_toolkit line editing, history,
pygments highlighting, completion of keywords and catalog names; a statement ends at a
top-level `;`), meta-commands (`\\d` and its `\\dt \\dv \\dm \\ds`, `\\x`, `\\pset`,
`\\timing`, `\\i`, `\\kafka`, `\\log`, `\\spark`, `\\q`, `\\?`; the Kafka ones,
`\\produce` and `\\topics`, live in `repl_kafka.py`), running statements so that Ctrl-C
cancels them without ending the session, showing results as `display` says (through
the pager when they do not fit), and printing SUBSCRIBE changes as they arrive. The
prompt comes first: the catalog's `kafka` connection and Spark are set up in background
threads, and only a statement that needs Spark waits for it, with a progress line. With
`--spark-ui`, the web UI's address is printed once Spark runs, above the prompt being
edited if need be. Ctrl-C never ends the session nor shows a traceback.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sluice import KEYWORDS, find_unterminated, parse_statement, redact_secrets, split_statements
from sluice.cli import repl_kafka
from sluice.cli.broker import CONNECTION_NAME, connect, embedded_broker, version
from sluice.cli.display import EXPANDED_CHOICES, Display, page
from sluice.cli.progress import ProgressLine, progress_text, watched
from sluice.cli.table import format_table
from sluice.errors import ExternalSystemError, SqlError, as_sql_error, format_error
from sluice.session import Session
from sluice.values import value_text

PROMPT = "sluice=> "
CONTINUATION = "sluice-> "
DEFAULT_HISTORY = Path.home() / ".sluice_history"

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

# psql's listing commands, as the SHOW statement each runs.
LISTINGS = {"dt": "SHOW TABLES", "dv": "SHOW VIEWS", "dm": "SHOW MATERIALIZED VIEWS", "ds": "SHOW SOURCES"}

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


class SparkStarter:
    """Starts sluice's Spark session in a background thread (importing pyspark alone takes
    seconds), so that the prompt does not wait for it. `factory` makes the session."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        # Called on the starting thread once the start-up has ended (well or not).
        self.on_ready: Callable[[], None] | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.session: Any = None
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.took = 0.0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._ready.clear()
        self.error = None
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="sluice-spark-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.session = self._factory()
        except Exception as e:  # reported to whichever statement waits for Spark
            self.error = e
        finally:
            self.took = time.monotonic() - self.started_at
            self._ready.set()
        if self.on_ready is not None:
            self.on_ready()

    def wait(self, timeout: float) -> bool:
        """Whether the start-up has ended (well or not) within `timeout` seconds."""
        return self._ready.wait(timeout)

    @property
    def running(self) -> bool:
        """Whether Spark has started (and did not fail to)."""
        return self._ready.is_set() and self.error is None and self.session is not None

    @property
    def starting(self) -> bool:
        return self._thread is not None and not self._ready.is_set()

    def check(self) -> None:
        """Raise the start-up's failure, and let the next statement try again."""
        if self.error is None:
            return
        error, self.error, self._thread = self.error, None, None
        raise ExternalSystemError(f"cannot start spark: {str(error).strip() or type(error).__name__}")



class Cancelled(Exception):
    """The user pressed Ctrl-C while a statement ran."""


def _interruptible(
    work: Callable[[], Any],
    on_interrupt: Callable[[], None] | None = None,
    progress: ProgressLine | None = None,
) -> Any:
    """`work()` watched (see `progress.watched`): Ctrl-C calls `on_interrupt()` and
    raises `Cancelled`."""
    try:
        return watched(work, progress, on_interrupt)
    except KeyboardInterrupt:
        raise Cancelled from None


def stream_rows(subscription: Any, write: Callable[[str], None], poll: float = 0.1) -> None:
    """Print a subscription's header, then each change as it arrives, tab-separated, until
    it ends, fails (`SqlError`, raised here) or Ctrl-C closes it (raises `Cancelled`)."""
    changes: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for row in subscription:
                changes.put(("row", row))
            changes.put(("end", None))
        except BaseException as e:  # handed to the printing thread
            changes.put(("error", e))

    write("\t".join(subscription.columns))
    threading.Thread(target=pump, name="sluice-subscribe", daemon=True).start()
    try:
        while True:
            try:
                kind, item = changes.get(timeout=poll)
            except queue.Empty:
                continue
            if kind == "row":
                write("\t".join(value_text(v) for v in item))
            elif kind == "error":
                raise item
            else:
                return
    except KeyboardInterrupt:
        raise Cancelled from None
    finally:
        subscription.close()


class Repl:
    """One shell session over `session`, with `broker` the Kafka address in use."""

    def __init__(
        self,
        session: Session,
        broker: str,
        *,
        embedded: bool,
        spark: SparkStarter | None = None,
        out: TextIO | None = None,
        display: Display | None = None,
    ) -> None:
        self.session = session
        self.broker = broker
        self.embedded = embedded
        self.spark = spark or SparkStarter(session.start_spark)
        self.out = out or sys.stdout
        self.display = display or Display()
        self.timing = False
        self.failed = False  # whether any statement or command failed (piped input's exit status)
        # Where `\\produce` reads its lines from: the terminal, or the rest of piped input.
        self.read_data: Callable[[], str | None] = lambda: None
        self._setup_done = threading.Event()
        self._setup_done.set()
        self._setup_error: SqlError | None = None
        self._ui_told = False  # whether the web UI address was printed (`--spark-ui`), or there is none
        self._ui_lock = threading.Lock()

    def write(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """What is not a result (the banner, Spark's start, an error): on stderr when
        results are for a script (CSV, unaligned or rows only), which reads stdout."""
        if self.display.for_scripts:
            print(text, file=sys.stderr, flush=True)
        else:
            self.write(text)

    def show(self, result) -> None:
        """A statement's result, as the display says, paged if it does not fit."""
        tty = self.out.isatty()
        width = shutil.get_terminal_size().columns if tty else None
        shown = self.display.result(result, width)
        if shown:  # CSV and rows-only output leave out command tags
            page(shown, self.out, enabled=self.display.pager)

    def banner_lines(self, version: str, *, spark_now: bool = True) -> list[str]:
        where = "embedded broker" if self.embedded else "broker"
        lines = [f"sluice {version}: type \\? for help, \\q to quit", f"kafka: {where} at {self.broker}"]
        if CONNECTION_NAME not in self.session.names():
            lines.append(f"  connection {CONNECTION_NAME} points at it: "
                         f"CREATE SOURCE … FROM KAFKA CONNECTION {CONNECTION_NAME} (TOPIC '…')")
        elif self.broker not in self.session.kafka_brokers(CONNECTION_NAME):
            lines.append(f"  note: catalog item {CONNECTION_NAME} already exists and does not "
                         f"point at this broker; CREATE CONNECTION … TO KAFKA (BROKER '{self.broker}')")
        master = os.environ.get("SLUICE_SPARK_MASTER", "local[2]")
        when = "starting in the background" if spark_now else "started when a statement needs it"
        lines.append(f"spark: {when} ({master})")
        return lines

    def start_background(self, *, spark_now: bool = True) -> None:
        """Create the `kafka` connection (building the parser, a third of a second) and
        start Spark, off the thread that shows the prompt."""
        if CONNECTION_NAME not in self.session.names():
            self._setup_done.clear()
            threading.Thread(target=self._create_connection, name="sluice-setup", daemon=True).start()
        if spark_now:
            self.spark.start()

    def _create_connection(self) -> None:
        try:
            connect(self.session, self.broker)
        except SqlError as e:  # shown before the next statement runs
            self._setup_error = e
        finally:
            self._setup_done.set()

    def handle(self, text: str) -> bool:
        """Run what Enter accepted: a meta-command or statements. False means quit."""
        stripped = text.strip()
        try:
            if stripped.startswith("\\"):
                return self.meta(parse_meta(stripped))
            self.run_script(text)
        except (Cancelled, KeyboardInterrupt):
            self.write("cancelled")
        except Exception as e:  # the shell's boundary: shown, and the session goes on
            self.failed = True
            self.note(format_error(as_sql_error(e)))
        return True

    def run_script(self, text: str) -> None:
        """Each statement in turn; an error does not stop the rest (Ctrl-C does)."""
        for start, end in split_statements(text):
            self.run_statement(text, start, end)

    def run_statement(self, text: str, start: int, end: int) -> None:
        self._wait_for_setup()
        began = time.perf_counter()
        try:
            statement = parse_statement(text, start, end)
            planned = _interruptible(lambda: self.session.plan(statement))
            if self.session.needs_spark(planned):
                self._wait_for_spark()
            subscribe = getattr(self.session, "subscribe", None)
            if self.session.is_subscribe(planned) and subscribe is not None:
                self._subscribe(subscribe, text[start:end].strip())
            else:
                own_text = redact_secrets(text[start:end])
                result = self._on_spark(own_text, lambda: self.session.apply(planned, statement))
                self.show(result)
        except Cancelled:
            raise
        except Exception as e:  # shown with its caret; the script's next statement runs
            self.failed = True
            self.note(format_error(as_sql_error(e), text))
        if self.timing:
            self.write(f"Time: {(time.perf_counter() - began) * 1000:.3f} ms")

    def _on_spark(
        self,
        text: str,
        work: Callable[[], Any],
        on_interrupt: Callable[[], None] | None = None,
    ) -> Any:
        """`work()` as a statement of the session's own, which Ctrl-C cancels (Spark's jobs
        with it)."""
        statement = self.session.cancellable(text)

        def run() -> Any:
            with self.session.running(statement):
                return work()

        def interrupt() -> None:
            if on_interrupt is not None:
                on_interrupt()
            self.session.cancel(statement)

        line = ProgressLine(self.out, lambda waited: progress_text(self.session.progress(statement), waited))
        return _interruptible(run, interrupt, line)

    def _subscribe(self, subscribe: Callable[[str], Any], text: str) -> None:
        """Print the changes of `session.subscribe(text)` until Ctrl-C or its end. A
        subscription that Ctrl-C overtook while it started is closed as soon as it exists."""
        lock = threading.Lock()
        state: dict[str, Any] = {"cancelled": False, "subscription": None}

        def start() -> Any:
            subscription = subscribe(text)
            with lock:
                state["subscription"] = subscription
                late = state["cancelled"]
            if late:
                subscription.close()
            return subscription

        def interrupt() -> None:
            with lock:
                state["cancelled"] = True
                subscription = state["subscription"]
            if subscription is not None:
                subscription.close()

        try:
            stream_rows(self._on_spark(text, start, interrupt), self.write)
        except SqlError as e:
            self.note(format_error(e, text))

    def _wait_for_setup(self) -> None:
        if not self._setup_done.is_set():
            try:
                while not self._setup_done.wait(0.1):
                    pass
            except KeyboardInterrupt:
                raise Cancelled from None
        if self._setup_error is not None:
            error, self._setup_error = self._setup_error, None
            self.note(format_error(error))

    def _wait_for_spark(self) -> None:
        """Block until Spark is up, showing that (and for how long) the statement waits."""
        self.spark.start()  # again, after a failed start
        if not self.spark.wait(0):
            if not self.out.isatty():
                self.note("starting Spark…")
            since = time.monotonic() - self.spark.started_at
            line = ProgressLine(
                self.out, lambda waited: f"starting Spark… {int(waited + since)} s", delay=0
            )
            try:
                line.tick()
                while not self.spark.wait(0.2):
                    line.tick()
            except KeyboardInterrupt:
                raise Cancelled from None
            finally:
                line.clear()
            self.note(f"Spark is ready (started in {self.spark.took:.1f} s)")
            self.tell_spark_ui()
        self.spark.check()

    def spark_ui_untold(self) -> bool:
        """Whether Spark runs with a web UI (`--spark-ui`) whose address is yet to be printed."""
        return not self._ui_told and self.spark.running and self.session.spark_ui() is not None

    def tell_spark_ui(self) -> None:
        """Print the address of Spark's web UI once, as soon as Spark runs with one; nothing
        before that, and nothing (nor a call into Spark) after."""
        with self._ui_lock:
            if self._ui_told or not self.spark.running:
                return
            url = self.session.spark_ui()
            self._ui_told = True  # told, or nothing to tell: Spark runs without its UI
        if url is not None:
            self.note(f"Spark UI: {url}")

    def _spark_status(self) -> None:
        master = os.environ.get("SLUICE_SPARK_MASTER", "local[2]")
        if self.spark.running:
            self.write(f"spark: running ({master}), started in {self.spark.took:.1f} s")
            url = self.session.spark_ui()
            self.write(f"web UI: {url}" if url else "web UI: off (start sluice with --spark-ui to run it)")
        elif self.spark.error is not None:
            self.write(f"spark: failed to start ({self.spark.error}); a statement that reads data tries again")
        elif self.spark.starting:
            self.write(f"spark: starting ({master}) for {time.monotonic() - self.spark.started_at:.0f} s")
        else:
            self.write(f"spark: not started ({master}); a statement that reads data starts it")

    def meta(self, command: MetaCommand) -> bool:
        name, argument = command.name, command.argument
        if name in ("q", "quit"):
            return False
        if name == "?":
            self.write(HELP)
        elif name == "d":
            self._describe(argument)
        elif name in LISTINGS:
            self._list(name)
        elif name == "x":
            self._set_expanded(argument)
        elif name == "pset":
            self._pset(argument)
        elif name == "log":
            self.write(str(self.session.spark_log()))
        elif name == "spark":
            self._spark_status()
        elif name == "timing":
            self._set_timing(argument)
        elif name == "i":
            self._include(argument)
        elif name == "kafka":
            self.write(self.broker)
        elif name == "produce":
            repl_kafka.produce(self.broker, argument, self.read_data, self.write, interactive=self.out.isatty())
        elif name == "topics":
            repl_kafka.topics(self.broker, self.write)
        else:
            self.failed = True
            self.write(f"invalid command \\{name}; try \\? for help")
        return True

    def _describe(self, name: str) -> None:
        self._wait_for_setup()
        if not name:
            relations = self.session.relations()
            if not relations:
                self.write("Did not find any relations.")
                return
            self.write("List of relations")
            self.write(format_table(("name", "type"), relations))
            return
        try:
            columns = self.session.execute(f"SHOW COLUMNS FROM {name}")
            about = self.session.describe(name)
            ingested = self.session.ingested(name)
        except SqlError as e:
            self.note(format_error(e))
            return
        self.show(columns)
        for line in about:
            self.write(line)
        if ingested is False:
            self.write("counters: none yet (only a source ingested continuously has them: one with a dead-letter "
                "table, or one a materialized view, sink or SUBSCRIBE reads, from the first statement reading it)")
        elif ingested:
            self.show(self.session.execute(f"SHOW SOURCE STATISTICS FOR {name}"))

    def _list(self, name: str) -> None:
        self._wait_for_setup()
        self.show(self.session.execute(LISTINGS[name]))

    def _set_expanded(self, argument: str) -> None:
        choice = argument.lower()
        if choice and choice not in EXPANDED_CHOICES:
            self.write(f"\\x: unrecognized value \"{argument}\"; expected on, off or auto")
            return
        self.display.expanded = choice or ("off" if self.display.expanded != "off" else "on")
        shown = "used automatically" if self.display.expanded == "auto" else self.display.expanded
        self.write(f"Expanded display is {shown}.")

    def _pset(self, argument: str) -> None:
        option, _, value = argument.partition(" ")
        value = value.strip().lower()
        if option != "pager":
            self.write(f"\\pset: unknown option: {option}; sluice knows pager")
            return
        if value not in ("", "on", "off"):
            self.write(f"\\pset: unrecognized value \"{value}\" for \"pager\"; expected on or off")
            return
        self.display.pager = not self.display.pager if not value else value == "on"
        self.write(f"Pager usage is {'on' if self.display.pager else 'off'}.")

    def _set_timing(self, argument: str) -> None:
        choice = argument.lower()
        if choice not in ("", "on", "off"):
            self.write(f"\\timing: unrecognized value \"{argument}\"; expected on or off")
            return
        self.timing = not self.timing if not choice else choice == "on"
        self.write(f"Timing is {'on' if self.timing else 'off'}.")

    def _include(self, argument: str) -> None:
        if not argument:
            self.write("\\i: missing required argument")
            return
        path = Path(argument).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            self.write(f"\\i: cannot read {argument}: {e.strerror or e}")
            return
        self.run_script(text)


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
    data_prompt = PromptSession(repl_kafka.PRODUCE_PROMPT)
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
        if embedded:
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
