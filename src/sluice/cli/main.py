"""`sluice` — the command-line front door.

`sluice parse [FILE|-] [--ast]` prints each statement's canonical SQL (or its syntax tree);
`sluice plan [FILE|-]` shows what a script would create and read, without Spark or Kafka.
Either prints the formatted error, with exit status 1, for a statement it cannot take.
"""

from __future__ import annotations

import argparse
import signal
import sys

from sluice.cli.describe import describe_plan
from sluice.errors import SqlError, format_error
from sluice.session import Session
from sluice.syntax import parse
from sluice.syntax.ast import dump


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def cmd_parse(args: argparse.Namespace) -> int:
    try:
        text = _read(args.file)
    except OSError as e:
        print(f"sluice: cannot read {args.file}: {e.strerror}", file=sys.stderr)
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
    try:
        text = _read(args.file)
    except OSError as e:
        print(f"sluice: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    with Session() as session:
        try:
            for statement in parse(text):
                print(describe_plan(session, statement))
        except SqlError as e:
            print(format_error(e, text), file=sys.stderr)
            return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sluice", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True)
    p = commands.add_parser("parse", help="print the canonical SQL of a script")
    p.add_argument("file", nargs="?", default="-", help="script to read (default: stdin)")
    p.add_argument("--ast", action="store_true", help="print the syntax tree instead")
    p.set_defaults(run=cmd_parse)
    p = commands.add_parser("plan", help="show what a script would create, without running it")
    p.add_argument("file", nargs="?", default="-", help="script to read (default: stdin)")
    p.set_defaults(run=cmd_plan)
    return top


def main(argv: list[str] | None = None) -> int:
    # Output piped into `head` and closed early ends quietly, as for any Unix tool.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
