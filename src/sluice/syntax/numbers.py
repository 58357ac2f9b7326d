"""Numeric literals as PostgreSQL 16 reads them, over sqlglot's tokens of a query.

sqlglot reads `0xff` as a bytes literal, `0b101` as a bit string, `0o17` as `0 AS o17`,
`1_000` as `1 AS _000` and `12abc` as `12 AS abc`. PostgreSQL's scanner (scan.l) reads
integers in hexadecimal, octal and binary (`0xff` is 255), digits separated by single
underscores, and refuses a number run into a name (`trailing junk after numeric literal`)
or a radix prefix without digits (`invalid hexadecimal integer`). Each token that starts
a number is read again from the query text with scan.l's patterns, longest match first
(the first pattern on a tie), and replaced by one NUMBER token of its decimal value.
"""

from __future__ import annotations

import re

from sqlglot.tokens import Token, TokenType

from sluice.errors import ParseError, Span

_DEC = r"\d(?:_?\d)*"
_NUMERIC = rf"(?:{_DEC}\.(?:{_DEC})?|\.{_DEC})"
_IDENTIFIER = r"[A-Za-z_\u0080-\U0010ffff][A-Za-z_\u0080-\U0010ffff0-9$]*"
_RADIX = {"x": (16, "[0-9A-Fa-f]"), "o": (8, "[0-7]"), "b": (2, "[01]")}
_RADIX_NAMES = {16: "hexadecimal", 8: "octal", 2: "binary"}
# scan.l's rules for what starts with a digit or a point, in its order.
_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("decimal", re.compile(_DEC)),
    *((f"radix{base}", re.compile(rf"0[{p}{p.upper()}](?:_?{digit})+")) for p, (base, digit) in _RADIX.items()),
    *((f"fail{base}", re.compile(rf"0[{p}{p.upper()}]_?")) for p, (base, _) in _RADIX.items()),
    ("decimal", re.compile(_NUMERIC)),
    ("real", re.compile(rf"(?:{_DEC}|{_NUMERIC})[Ee][-+]?{_DEC}")),
    ("junk", re.compile(rf"(?:{_DEC}|{_NUMERIC})[Ee][-+]")),
    *(
        ("junk", re.compile(rf"(?:{number}){_IDENTIFIER}"))
        for number in (
            _DEC,
            *(rf"0[{p}{p.upper()}](?:_?{digit})+" for p, (_, digit) in _RADIX.items()),
            _NUMERIC,
            rf"(?:{_DEC}|{_NUMERIC})[Ee][-+]?{_DEC}",
        )
    ),
]
# sqlglot tokens a number may start: what it reads as a number, bytes, bits or a name.
_NUMBER_STARTS = {TokenType.NUMBER, TokenType.HEX_STRING, TokenType.BIT_STRING, TokenType.IDENTIFIER, TokenType.VAR}


def postgres_numbers(tokens: list[Token], text: str, offset: int) -> list[Token]:
    """`tokens` of `text` with every number as PostgreSQL 16 reads it."""
    out: list[Token] = []
    covered = 0  # the text up to here is one number already read
    for token in tokens:
        if token.start < covered:
            continue
        head = text[token.start : token.start + 2]
        if token.token_type not in _NUMBER_STARTS or not (head[:1].isdigit() or re.fullmatch(r"\.\d", head)):
            out.append(token)
            continue
        kind, literal = _longest(text, token.start)
        covered = token.start + len(literal)
        span = Span(offset + token.start, offset + covered)
        if kind == "junk":
            raise ParseError(f'trailing junk after numeric literal at or near "{literal}"', span=span)
        if kind.startswith("fail"):
            name = _RADIX_NAMES[int(kind[4:])]
            raise ParseError(f'invalid {name} integer at or near "{literal}"', span=span)
        digits = literal.replace("_", "")
        if kind.startswith("radix"):
            digits = str(int(digits[2:], int(kind[5:])))
        out.append(Token(TokenType.NUMBER, digits, token.line, token.col, token.start, covered - 1, token.comments))
    return out


def _longest(text: str, start: int) -> tuple[str, str]:
    best = ("decimal", "")
    for kind, pattern in _RULES:
        match = pattern.match(text, start)
        if match is not None and len(match.group()) > len(best[1]):
            best = (kind, match.group())
    return best
