"""One shell session (`Repl`): what `sluice repl` does with each unit the loop
(`repl_loop.py`) reads. Meta-commands (`\\d` and its `\\dt \\dv \\dm \\ds`, `\\x`, `\\pset`,
`\\timing`, `\\i`, `\\kafka`, `\\log`, `\\spark`, `\\q`, `\\?`; the Kafka ones, `\\produce`
and `\\topics`, live in `repl_kafka.py`); statements, run so that Ctrl-C cancels them
without ending the session, their results shown as `display` says (through the pager when
they do not fit), and SUBSCRIBE changes printed as they arrive. The prompt comes first:
the catalog's `kafka` connection and Spark are set up in background threads, and only a
statement that needs Spark waits for it, with a progress line. With `--spark-ui`, the web
UI's address is printed once Spark runs, above the prompt being edited if need be. Ctrl-C
never ends the session nor shows a traceback.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from sluice import parse_statement, redact_secrets, split_statements
from sluice.cli import repl_kafka
from sluice.cli.broker import CONNECTION_NAME, connect
from sluice.cli.display import EXPANDED_CHOICES, Display, page
from sluice.cli.interrupt import Cancelled, stream_rows
from sluice.cli.progress import ProgressLine, progress_text, watched
from sluice.cli.repl_input import HELP, MetaCommand, parse_meta
from sluice.cli.spark_starter import SparkStarter
from sluice.cli.table import format_table
from sluice.errors import SqlError, as_sql_error, format_error
from sluice.session import Session

# psql's listing commands, as the SHOW statement each runs.
LISTINGS = {"dt": "SHOW TABLES", "dv": "SHOW VIEWS", "dm": "SHOW MATERIALIZED VIEWS", "ds": "SHOW SOURCES"}


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
