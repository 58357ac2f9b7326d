"""`sluice` — the command-line front door.

`sluice` alone, or `sluice repl [--data-dir DIR] [--broker ADDR] [--master URL]
[--history-file FILE]`, starts the interactive SQL shell (on an embedded Kafka broker
unless `--broker` names one). It and `run` take Spark's settings (`--conf KEY=VALUE`,
repeatable, after those of the `$SLUICE_SPARK_CONF` file; `--spark-ui`) and psql's
output flags (`--csv`, `-A` unaligned, `-t` rows only).
`sluice parse [FILE|-] [--ast]` prints each statement's canonical SQL (or its syntax tree);
`sluice plan [FILE|-]` shows what a script would create and read, without Spark or Kafka.
Either prints the formatted error, with exit status 1, for a statement it cannot take.
`sluice kafka serve|topics|create-topic|produce|consume …` is Kafka from the command line
(`cli/kafka.py`); `sluice kafka serve [--port P] [--topic NAME[:PARTITIONS] ...]` runs an
embedded Kafka broker on loopback, prints `kafka listening on <bootstrap>`, and serves
until SIGINT or SIGTERM.
`sluice demo` runs a narrated scenario on the embedded broker and a local Spark session.
`sluice run [FILE|-c SQL] [--keep-going] [--data-dir DIR] [--data-uri URI] [--broker ADDR |
--embedded]` executes a script and prints each result; it stops at the first error (exit status 1)
unless told to keep going. With a broker (or an embedded one) it first creates the
connection `kafka` to it, as the REPL does. On a terminal, a statement that takes over a
second shows a progress line on stderr. Sinks run while a process holds their data
directory, so `run` ends by waiting until every sink has delivered what its relation holds
(a sink left stalled or failed is a NOTICE on stderr).
`sluice serve [--port P] [--max-connections N] [--tls-cert FILE --tls-key FILE] [--data-dir
DIR] [--data-uri URI] [--broker ADDR | --embedded]` serves the data directory's session to
PostgreSQL clients (psql, drivers) on 127.0.0.1, printing `sluice listening on
127.0.0.1:P`, until SIGINT or SIGTERM; then it ends the connections and closes the session
(stopping streams and sinks).
`sluice test PATH... [--rewrite]` runs sqllogictest files (directories: their `.slt` and
`.test` files, recursively) and ends with `N passed, N failed`; exit status 1 on a failure.
Whatever fails in a command is printed as an `ERROR:` (exit status 1), never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import contextmanager

from sluice import dump, parse, parse_statement, split_statements
from sluice.cli.broker import CONNECTION_NAME, connect, open_broker, version
from sluice.cli.display import Display
from sluice.cli.kafka import BROKER_VARIABLE, add_kafka_commands, kafka_argv
from sluice.cli.progress import ProgressLine, progress_text, watched
from sluice.errors import SqlError, UndefinedObject, as_sql_error, format_error
from sluice.session import Session

# How long `sluice run` waits at its end for the sinks to deliver what their relations hold.
SINK_DRAIN_SECONDS = 300.0


def _read(path: str) -> str | None:
    """The script at `path` (`-`: stdin), or None after saying why it cannot be read."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        print(f"sluice: cannot read {path}: {e.strerror}", file=sys.stderr)
        return None


def cmd_parse(args: argparse.Namespace) -> int:
    text = _read(args.file)
    if text is None:
        return 2
    try:
        statements = parse(text)
    except SqlError as e:
        print(format_error(e, text), file=sys.stderr)
        return 1
    for statement in statements:
        print(dump(statement) if args.ast else statement.to_sql() + ";")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    text = _read(args.file)
    if text is None:
        return 2
    with Session(check_kafka=False) as session:
        try:
            for statement in parse(text):
                print(session.plan_text(statement))
        except SqlError as e:
            print(format_error(e, text), file=sys.stderr)
            return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    text = args.command_text if args.command_text is not None else _read(args.file)
    if text is None:
        return 2
    failed = ui_shown = False
    display = _display(args)
    with (
        open_broker(args.broker, embedded=args.embedded) as broker,
        Session(args.data_dir, spark_conf=args.conf, spark_ui=args.spark_ui, data_uri=args.data_uri) as session,
        _terminal() as tty,
    ):
        for notice in session.notices:
            print(f"WARNING:  {notice}", file=sys.stderr)
        if broker is not None:
            connect(session, broker)
        for start, end in split_statements(text):
            # In a terminal, a statement that takes a while shows what it waits on (on stderr).
            line = ProgressLine(tty, lambda waited: progress_text(session.progress(), waited))
            try:
                result = watched(lambda: session.execute_statement(parse_statement(text, start, end)), line)
            except SqlError as e:
                if broker is None:
                    _hint_missing_connection(e)
                print(format_error(e, text), file=sys.stderr)
                if not args.keep_going:
                    return 1
                failed = True
                continue
            if args.spark_ui and not ui_shown and (url := session.spark_ui()) is not None:
                print(f"Spark UI: {url}", file=sys.stderr)
                ui_shown = True
            shown = display.result(result)
            if shown:  # CSV and rows-only output leave out command tags
                print(shown)
        # The data directory's sinks deliver what their relations hold before the process
        # (which runs them) ends; they resume from there when it is opened again.
        line = ProgressLine(tty, lambda waited: progress_text(session.progress(), waited))
        for name, status, error in watched(lambda: session.drain_sinks(SINK_DRAIN_SECONDS), line):
            print(f'NOTICE:  sink "{name}" is {status}' + (f": {error}" if error else ""), file=sys.stderr)
    return 1 if failed else 0


def _hint_missing_connection(error: SqlError) -> None:
    """A script copied from the REPL names the connection `kafka` it creates; `run` creates
    it only when told which broker to use: say how."""
    if isinstance(error, UndefinedObject) and error.message == f"unknown catalog item '{CONNECTION_NAME}'":
        error.hint = (
            f"sluice run creates connection {CONNECTION_NAME} when given a broker: --broker ADDR "
            f"(or ${BROKER_VARIABLE}), or --embedded to start one"
        )


@contextmanager
def _terminal():
    """stderr for the progress line, on a descriptor of its own: Spark points descriptor 2
    at its log while it starts."""
    if not sys.stderr.isatty():
        yield sys.stderr
        return
    with os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8") as own:
        yield own


def cmd_serve(args: argparse.Namespace) -> int:
    from sluice.pgwire.server import Server, tls_context  # the protocol only for the server

    if (args.tls_cert is None) != (args.tls_key is None):
        print("sluice: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    try:
        tls = None if args.tls_cert is None else tls_context(args.tls_cert, args.tls_key)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        print(f"sluice: cannot use the TLS certificate and key: {e}", file=sys.stderr)
        return 2

    with (
        open_broker(args.broker, embedded=args.embedded) as broker,
        Session(args.data_dir, spark_conf=args.conf, spark_ui=args.spark_ui, data_uri=args.data_uri) as session,
    ):
        for notice in session.notices:
            print(f"WARNING:  {notice}", file=sys.stderr)
        if broker is not None:
            connect(session, broker)
        server = Server(session, port=args.port, max_connections=args.max_connections, tls=tls)
        def stop(signum, frame) -> None:
            server.stop(timeout=0)

        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            host, port = server.address
            print(f"sluice listening on {host}:{port}", flush=True)
            server.serve()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            server.stop()
        print("sluice stopped", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from sluice.cli.demo import main as demo  # Spark only for the commands that need it

    return demo()


def cmd_test(args: argparse.Namespace) -> int:
    from sluice.cli.sqllogic import run_paths

    return run_paths(args.paths, rewrite=args.rewrite)


def cmd_repl(args: argparse.Namespace) -> int:
    from sluice.cli.repl_loop import main as repl  # prompt_toolkit only for the shell

    return repl(
        args.data_dir, args.broker, args.master, args.history_file,
        spark_conf=args.conf, spark_ui=args.spark_ui, display=_display(args),
    )


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def _add_spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting (repeatable; after those of the $SLUICE_SPARK_CONF file)")
    p.add_argument("--spark-ui", action="store_true", help="run Spark's web UI and print its address")


def _add_data_options(p: argparse.ArgumentParser) -> None:
    """Where the data is and which broker connection `kafka` names: `run` and `serve`."""
    p.add_argument("--data-dir", help="keep the catalog and tables here (default: temporary)")
    p.add_argument("--data-uri", metavar="URI",
                   help="keep streams, sinks and tables under this Hadoop filesystem URI (default: $SLUICE_DATA_URI)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--broker", metavar="ADDR", default=os.environ.get(BROKER_VARIABLE),
                       help=f"create connection kafka to this broker (default: ${BROKER_VARIABLE})")
    where.add_argument("--embedded", action="store_true",
                       help="start an embedded Kafka broker and create connection kafka to it")


def _add_spark_and_output_options(p: argparse.ArgumentParser) -> None:
    """Spark's settings and psql's output flags, shared by the shell and `run`."""
    _add_spark_options(p)
    p.add_argument("--csv", action="store_true", help="print results as CSV")
    p.add_argument("-A", "--no-align", action="store_true", help="unaligned output: fields joined by |")
    p.add_argument("-t", "--tuples-only", action="store_true", help="rows only: no header, no row count")


def _display(args: argparse.Namespace) -> Display:
    shown = "csv" if args.csv else "unaligned" if args.no_align else "aligned"
    return Display(format=shown, tuples_only=args.tuples_only)


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sluice", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"sluice {version()}")
    commands = top.add_subparsers(dest="command", required=True)
    p = commands.add_parser("repl", help="the interactive SQL shell (also: sluice with no command)")
    p.add_argument("--data-dir", help="keep the catalog and tables here (default: temporary)")
    p.add_argument("--broker", metavar="ADDR", default=os.environ.get(BROKER_VARIABLE),
                   help=f"Kafka bootstrap address (default: ${BROKER_VARIABLE}, else start an embedded broker)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master (default: $SLUICE_SPARK_MASTER or local[2])")
    p.add_argument("--history-file", metavar="FILE",
                   help="where line-editing history is kept (default: ~/.sluice_history)")
    _add_spark_and_output_options(p)
    p.set_defaults(run=cmd_repl)
    p = commands.add_parser("parse", help="print the canonical SQL of a script")
    p.add_argument("file", nargs="?", default="-", help="script to read (default: stdin)")
    p.add_argument("--ast", action="store_true", help="print the syntax tree instead")
    p.set_defaults(run=cmd_parse)
    p = commands.add_parser("run", help="execute a script and print each result")
    p.add_argument("file", nargs="?", default="-", help="script to read (default: stdin)")
    p.add_argument("-c", dest="command_text", metavar="SQL", help="run this SQL instead of a file")
    p.add_argument("--keep-going", action="store_true", help="run the rest after an error")
    _add_data_options(p)
    _add_spark_and_output_options(p)
    p.set_defaults(run=cmd_run)
    p = commands.add_parser("serve", help="serve PostgreSQL clients (psql, drivers) on 127.0.0.1")
    p.add_argument("--port", type=int, default=6875, help="the port to listen on (default: 6875, as Materialize)")
    p.add_argument("--max-connections", type=int, default=100, metavar="N",
                   help="refuse connections past this many (53300; default: 100)")
    p.add_argument("--tls-cert", metavar="FILE", help="encrypt connections that ask for it with this certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    _add_data_options(p)
    _add_spark_options(p)
    p.set_defaults(run=cmd_serve)
    p = commands.add_parser("demo", help="run a narrated demo on an embedded Kafka broker")
    p.set_defaults(run=cmd_demo)
    p = commands.add_parser("plan", help="show what a script would create, without running it")
    p.add_argument("file", nargs="?", default="-", help="script to read (default: stdin)")
    p.set_defaults(run=cmd_plan)
    add_kafka_commands(commands)
    p = commands.add_parser("test", help="run sqllogictest files against fresh sessions")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a .slt/.test file or a directory")
    p.add_argument("--rewrite", action="store_true",
                   help="rewrite expected results in place with the actual ones")
    p.set_defaults(run=cmd_test)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["repl", *argv]  # `sluice` alone (or with the shell's flags) is the shell
    args = build_parser().parse_args(kafka_argv(argv))
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130  # as a shell reports a command ended by SIGINT
    except BrokenPipeError:
        # Output piped into `head` and closed early ends quietly, as for any Unix tool. Not
        # by SIGPIPE's default action: that would also kill a process whose socket peer
        # went away (the broker's forwarding listener, the py4j gateway).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE
    except Exception as e:  # the command's boundary: what no statement caught
        print(format_error(as_sql_error(e)), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
