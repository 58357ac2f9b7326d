"""The Lark LALR parser for the dialect, built once per process and cached.

The grammar's terminals document the tokens and feed the LALR table; `StateLexer` does the
scanning.
"""

from __future__ import annotations

from functools import cache

import lark

from sluice.syntax.keywords import grammar_text
from sluice.syntax.lexer import StateLexer


@cache
def parser() -> lark.Lark:
    return lark.Lark(
        grammar_text(),
        parser="lalr",
        lexer=StateLexer,
        keep_all_tokens=True,
        maybe_placeholders=True,
    )
