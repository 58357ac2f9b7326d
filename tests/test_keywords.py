"""The RESERVED keyword set matches the parser: exactly the keywords that some LALR state
accepts alongside an identifier, which the lexer would read as keywords there."""

from sluice.syntax.grammar import parser
from sluice.syntax.keywords import KEYWORDS, RESERVED


def test_reserved_matches_parse_table() -> None:
    states = parser().parser.parser.parser.parse_table.states
    clashing = {
        name
        for accepted in states.values()
        if "IDENTIFIER" in accepted
        for name in accepted
        if name in KEYWORDS
    }
    assert clashing == RESERVED
