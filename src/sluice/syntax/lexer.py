"""The dialect's lexer: one regex per token, keywords decided by the LALR state.

This does what Lark's contextual lexer does — a word is a keyword only where the parser
state accepts that keyword, otherwise an identifier — with one scan per token instead of
one per candidate terminal, which is most of what parsing costs. Where the state accepts
a query body (the QUERY, PAREN_QUERY and *_STATEMENT terminals), the rest of the statement
becomes that one token, for sqlglot.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from lark.common import LexerConf
from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer, PatternStr, Token
from lark.parsers.lalr_analysis import Shift

from sluice.errors import InternalError

_TOKEN = re.compile(
    r"""
    (?:\s+|--[^\n]*|/\*.*?\*/)*+            # skipped: whitespace and comments
    (?:
        (?P<word>[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*)
      | (?P<quoted>"(?:[^"]|"")+")
      | (?P<string>'(?:[^']|'')*')
      | (?P<decimal>[0-9]*\.[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)
      | (?P<integer>[0-9]+)
      | (?P<sign>[-+])
      | (?P<punct>[(),.=\[\]])
      | (?P<end>\Z)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_GROUP_TERMINALS = {
    "quoted": "QUOTED_IDENTIFIER",
    "string": "STRING",
    "decimal": "DECIMAL",
    "integer": "INTEGER",
    "sign": "SIGN",
}
_QUERY_LEADS = {"SELECT", "WITH", "VALUES", "TABLE"}
_STATEMENT_LEADS = {
    "INSERT": "INSERT_STATEMENT",
    "UPDATE": "UPDATE_STATEMENT",
    "DELETE": "DELETE_STATEMENT",
}


class StateLexer(Lexer):
    __future_interface__ = 2  # Lark passes (lexer_state, parser_state) to `lex`

    def __init__(self, conf: LexerConf) -> None:
        self.keywords: dict[str, str] = {}
        self.punctuation: dict[str, str] = {}
        for terminal in conf.terminals:
            pattern = terminal.pattern
            if isinstance(pattern, PatternStr):
                if pattern.value.isalpha():
                    self.keywords[pattern.value.upper()] = terminal.name
                else:
                    self.punctuation[pattern.value] = terminal.name

    def lex(self, lexer_state, parser_state) -> Iterator[Token]:  # type: ignore[override]
        text_slice = lexer_state.text
        text, pos, stop = text_slice.text, text_slice.start, text_slice.end
        states = parser_state.parse_conf.parse_table.states
        while True:
            match = _TOKEN.match(text, pos, stop)
            if match is None:
                raise UnexpectedCharacters(
                    text, _skip_blank(text, pos, stop), None, None,
                    allowed={t for t in states[parser_state.position] if t.isupper()},
                )
            kind = match.lastgroup
            if kind is None:
                raise InternalError.bug("a token of no group of the lexer's pattern")
            if kind == "end":
                return
            start, pos = match.start(kind), match.end()
            value = match.group(kind)
            accepted = states[parser_state.position]
            if kind == "word":
                # Keywords are ASCII: "ſelect" must not fold onto SELECT.
                word = value.upper() if value.isascii() else ""
                name = self.word_terminal(word, accepted, parser_state)
                if name == "QUERY" and word == "WITH" and _opens_list(text, pos, stop):
                    # `WITH (` is never a query's WITH (a CTE is named first): EXPLAIN's modifiers.
                    name = self.keywords.get(word, name) if self.keywords.get(word) in accepted else name
                if name in _REST_OF_STATEMENT:
                    yield _token(name, text[start:stop], start)
                    return
            elif kind == "punct":
                name = self.punctuation[value]
                if value == "(" and "LPAR" not in accepted:
                    rest = next((t for t in ("PAREN_QUERY", "QUERY") if t in accepted), None)
                    if rest is not None:
                        yield _token(rest, text[start:stop], start)
                        return
            else:
                name = _GROUP_TERMINALS[kind]
            yield _token(name, value, start)

    def word_terminal(self, word: str, accepted, parser_state) -> str:
        if word in _QUERY_LEADS and "QUERY" in accepted:
            return "QUERY"
        statement = _STATEMENT_LEADS.get(word)
        if statement is not None and statement in accepted:
            return statement
        keyword = self.keywords.get(word)
        if keyword is None:
            return "IDENTIFIER"
        if "IDENTIFIER" not in accepted:
            return keyword
        # Both are in the table, but LALR merges the lookaheads of states it shares, so one
        # of them may only be a lookahead that a reduction would then refuse: ask.
        if keyword in accepted and _shiftable(parser_state, keyword):
            return keyword
        return "IDENTIFIER"


_REST_OF_STATEMENT = {"QUERY", "PAREN_QUERY", *_STATEMENT_LEADS.values()}
_BLANK = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*+", re.DOTALL)


def _skip_blank(text: str, pos: int, stop: int) -> int:
    blank = _BLANK.match(text, pos, stop)  # it matches the empty string too
    return pos if blank is None else blank.end()


def _opens_list(text: str, pos: int, stop: int) -> bool:
    """Whether the next token after `pos` is `(`."""
    at = _skip_blank(text, pos, stop)
    return at < stop and text[at] == "("


def _shiftable(parser_state, terminal: str) -> bool:
    """Whether the parser would shift `terminal` after the reductions it implies."""
    states = parser_state.parse_conf.parse_table.states
    stack = list(parser_state.state_stack)
    while True:
        action = states[stack[-1]].get(terminal)
        if action is None:
            return False
        kind, target = action
        if kind is Shift:
            return True
        size = len(target.expansion)
        if size:
            del stack[-size:]
        stack.append(states[stack[-1]][target.origin.name][1])


def _token(name: str, value: str, start: int) -> Token:
    return Token(name, value, start, None, None, None, None, start + len(value))
