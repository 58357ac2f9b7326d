"""The Lark LALR parser for the dialect, built once per process and cached.

The grammar's terminals document the tokens and feed the LALR table; `StateLexer` does the
scanning. Building the LALR table takes about half a second, every process that parses
anything pays it, so the built parser is kept on disk (`cache_file`) and loaded from
there (20 ms). Lark checks the file against a hash of the grammar, its options and its own
version before using it, and builds afresh (rewriting the file) when it does not match or
cannot be read; a cache directory that cannot be written only costs the build.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

import lark

from sluice.syntax.keywords import grammar_text
from sluice.syntax.lexer import StateLexer


@cache
def parser() -> lark.Lark:
    text = grammar_text()
    return lark.Lark(
        text,
        parser="lalr",
        lexer=StateLexer,
        keep_all_tokens=True,
        maybe_placeholders=True,
        cache=cache_file(text),
    )


def cache_file(text: str) -> str | bool:
    """Where the built parser of grammar `text` is kept: the user's cache directory
    (`$XDG_CACHE_HOME/sluice`, else `~/.cache/sluice`), never a shared temporary
    directory — the file is a pickle, and loading one another user could write would run
    their code. False (no cache) when there is no such directory to be had."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "sluice"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return False
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return str(folder / f"grammar-{digest}.lark")
