"""`sluice` — the command-line front door.

`sluice parse [FILE|-] [--ast]` prints each statement's canonical SQL (or its syntax tree),
or the formatted error with exit status 1.
"""

from __future__ import annotations

import argparse
import sys

from sluice.errors import SqlError, format_error
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


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sluice", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True)
    p = commands.add_parser("parse", help="print the canonical SQL of a script")
    p.add_argument("file", nargs="?", default="-", help="script to read (default: stdin)")
    p.add_argument("--ast", action="store_true", help="print the syntax tree instead")
    p.set_defaults(run=cmd_parse)
    return top


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
