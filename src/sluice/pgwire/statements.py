"""What a connection reads in a statement's text before sluice's parser does: `$n`
placeholders (with the types their `::type` casts give them), and the statements that
belong to the connection rather than to the dialect — transaction control, SET, RESET
and SHOW of a session variable — or that the wire does not carry yet.

Placeholders are replaced by the literals a Bind supplies; `Substituted.original`
carries an error's position in the replaced text back to the client's text.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from sluice.errors import InvalidTimeout, UndefinedParameter

# Literals, quoted identifiers and comments (where `$1` is no placeholder), or a placeholder.
_TOKENS = re.compile(
    r"""(?xs)
      [Ee]'(?:[^'\\]|\\.|'')*'
    | '(?:[^']|'')*'
    | "(?:[^"]|"")*"
    | --[^\n]*
    | /\*.*?\*/
    | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*)?\$).*?(?P=dollar)
    | \$(?P<number>[0-9]+)(?P<cast>\s*::\s*(?P<type>double\s+precision|[A-Za-z_][A-Za-z0-9_]*))?
    """
)
MAX_PARAMETERS = 65535
# `$n::type` names: the OID a parameter cast this way is described with.
_CAST_OIDS = {
    "bool": 16, "boolean": 16, "bytea": 17, "int8": 20, "bigint": 20, "int2": 21, "smallint": 21,
    "int4": 23, "int": 23, "integer": 23, "text": 25, "varchar": 25, "float4": 700, "real": 700,
    "float8": 701, "double precision": 701, "numeric": 1700, "decimal": 1700, "date": 1082,
    "time": 1083, "timestamp": 1114, "timestamptz": 1184, "interval": 1186, "uuid": 2950,
    "jsonb": 3802,
}


def placeholders(sql: str) -> list[int]:
    """The type OID of each parameter `$1`…`$n` of `sql` as its first `::type` cast names
    it (0, unknown, when none does); as many as the highest placeholder number."""
    types: dict[int, int] = {}
    for match in _TOKENS.finditer(sql):
        if match.group("number") is None:
            continue
        number = int(match.group("number"))
        if not 1 <= number <= MAX_PARAMETERS:
            raise UndefinedParameter(f"there is no parameter ${number}")
        cast = " ".join((match.group("type") or "").lower().split())
        if types.get(number, 0) == 0:
            types[number] = _CAST_OIDS.get(cast, 0)
    return [types.get(n, 0) for n in range(1, max(types, default=0) + 1)]


@dataclass(frozen=True)
class Substituted:
    """`text`, the statement with its placeholders replaced; `_edits`: (start in `text`,
    end in `text`, start in the original, its shift after the edit) of each replacement."""

    text: str
    _edits: tuple[tuple[int, int, int, int], ...] = ()

    def original(self, offset: int) -> int:
        """Where character `offset` of `text` was in the original text."""
        i = bisect_right([e[0] for e in self._edits], offset) - 1
        if i < 0:
            return offset
        start, end, original_start, shift = self._edits[i]
        return original_start if offset < end else offset - shift


def substitute(sql: str, literals: list[str]) -> Substituted:
    edits: list[tuple[int, int, int, int]] = []
    out: list[str] = []
    last = 0
    length = 0
    for match in _TOKENS.finditer(sql):
        if match.group("number") is None:
            continue
        number = int(match.group("number"))
        if number > len(literals):
            raise UndefinedParameter(f"there is no parameter ${number}")
        literal = f"({literals[number - 1]})"
        out.append(sql[last : match.start()])
        length += match.start() - last
        start = length
        out.append(literal)
        length += len(literal)
        last = match.start() + len(match.group(0)) - len(match.group("cast") or "")
        edits.append((start, length, match.start(), length - last))
    out.append(sql[last:])
    return Substituted("".join(out), tuple(edits))


# What clients ask a PostgreSQL server about itself, which sluice does not answer yet: its
# catalog schemas and session functions (Spark would answer some of these, wrongly: its
# own version, schema `default`, the operating system's user).
_CATALOG = re.compile(
    r"""(?ix)\b(?:
      (?P<schema>pg_catalog|information_schema|mz_catalog|mz_internal)\s*\.
    | (?P<function>version|current_schema|current_schemas|current_database|current_catalog|pg_backend_pid)\s*\(
    | (?P<keyword>current_user|session_user|current_role)\b
    )"""
)


def catalog_question(sql: str) -> tuple[str, int] | None:
    """(what, offset) of the first catalog schema or session function `sql` names outside
    its literals and comments, if any."""
    blanked = list(sql)
    for match in _TOKENS.finditer(sql):
        if match.group("number") is None:
            blanked[match.start() : match.end()] = " " * (match.end() - match.start())
    found = _CATALOG.search("".join(blanked))
    if found is None:
        return None
    if found.group("schema"):
        return found.group("schema").lower(), found.start()
    if found.group("function"):
        return found.group("function").lower() + "()", found.start()
    return found.group("keyword").lower(), found.start()


_WORDS = re.compile(r"[A-Za-z_]+")


def leading_words(sql: str, n: int = 2) -> list[str]:
    """The first `n` words of a statement, upper-cased, comments and blanks skipped."""
    text = re.sub(r"(?s)^(\s|--[^\n]*|/\*.*?\*/)*", "", sql)
    return [w.upper() for w in _WORDS.findall(text[:200])[:n]]


TRANSACTION_START = {"BEGIN", "START"}
TRANSACTION_END = {"COMMIT", "END", "ROLLBACK", "ABORT"}
# Statements clients send that sluice's dialect does not have, or the wire does not carry
# yet: refused with 0A000 naming them, never misread.
UNSUPPORTED = {
    "MOVE": "MOVE",
    "PREPARE": "PREPARE",
    "EXECUTE": "EXECUTE",
    "DEALLOCATE": "DEALLOCATE",
    "DISCARD": "DISCARD",
    "LISTEN": "LISTEN",
    "NOTIFY": "NOTIFY",
    "UNLISTEN": "UNLISTEN",
    "SAVEPOINT": "SAVEPOINT",
    "RELEASE": "RELEASE SAVEPOINT",
    "SUBSCRIBE": "SUBSCRIBE over the wire",
}
_SET = re.compile(
    r"(?is)^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_.]*)\s*(?:=|\s+TO\s+|\s+)\s*(?P<value>.*?)\s*;?\s*$"
)
_RESET = re.compile(r"(?is)^\s*RESET\s+(?P<name>[A-Za-z_][A-Za-z0-9_.]*|ALL)\s*;?\s*$")
_SHOW = re.compile(r"(?is)^\s*SHOW\s+(?P<name>[A-Za-z_][A-Za-z0-9_.]*|ALL)\s*;?\s*$")
_TIME_ZONE = re.compile(r"(?is)^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(?P<value>.*?)\s*;?\s*$")


_COPY = re.compile(
    r"(?is)^\s*COPY\s*\((?P<query>.*)\)\s*TO\s+STDOUT"
    r"(?:\s*(?:WITH\s*)?\(\s*FORMAT\s+(?P<format>[A-Za-z_]+)\s*\))?\s*;?\s*$"
)


def copy_out(sql: str) -> tuple[int, int, str] | None:
    """(start, end, format) of the query of `COPY (query) TO STDOUT [WITH (FORMAT f)]`;
    None for another COPY."""
    match = _COPY.match(sql)
    if match is None:
        return None
    return match.start("query"), match.end("query"), (match.group("format") or "text").lower()


_NAME = r'(?P<name>"(?:[^"]|"")*"|[A-Za-z_][A-Za-z0-9_$]*)'
_DECLARE = re.compile(
    rf"(?is)^\s*DECLARE\s+{_NAME}\s+(?P<options>(?:[A-Za-z]+\s+)*?)CURSOR\s+"
    r"(?:(?:WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(?P<query>.*?)\s*;?\s*$"
)
_FETCH = re.compile(
    rf"(?is)^\s*FETCH\s+(?:(?:FORWARD|NEXT)\s+)?(?P<count>ALL\s+|[0-9]+\s+)?(?:(?:FROM|IN)\s+)?{_NAME}"
    r"(?:\s+WITH\s*\(\s*TIMEOUT\s*=?\s*'(?P<timeout>[^']*)'\s*\))?\s*;?\s*$"
)
_CLOSE = re.compile(rf"(?is)^\s*CLOSE\s+(?:ALL|{_NAME})\s*;?\s*$")
_SECONDS = re.compile(r"(?i)^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|sec|secs|seconds?|min|minutes?)?\s*$")


def _name(text: str) -> str:
    return text[1:-1].replace('""', '"') if text.startswith('"') else text.lower()


def declare(sql: str) -> tuple[str, str, int, int] | None:
    """(cursor name, options, start, end of its query) of a DECLARE … CURSOR FOR query."""
    match = _DECLARE.match(sql)
    if match is None:
        return None
    return _name(match.group("name")), match.group("options").upper().strip(), match.start("query"), match.end("query")


def fetch(sql: str) -> tuple[str, int | None, float | None] | None:
    """(cursor name, how many rows (None: all), timeout in seconds) of a FETCH."""
    match = _FETCH.match(sql)
    if match is None:
        return None
    count = (match.group("count") or "1").strip().upper()
    timeout = match.group("timeout")
    seconds = None
    if timeout is not None:
        found = _SECONDS.match(timeout)
        if found is None:
            raise InvalidTimeout(f'invalid input syntax for type interval: "{timeout}"')
        unit = (found.group(2) or "s").lower()
        seconds = float(found.group(1)) * (0.001 if unit == "ms" else 60 if unit.startswith("min") else 1)
    return _name(match.group("name")), None if count == "ALL" else int(count), seconds


def close_cursor(sql: str) -> str | None:
    """The cursor CLOSE names ("" for CLOSE ALL); None for another statement."""
    match = _CLOSE.match(sql)
    if match is None:
        return None
    return _name(match.group("name")) if match.group("name") else ""


def set_statement(sql: str) -> tuple[str, str | None] | None:
    """(name, value) of `SET name = value` (value None for RESET); None for another
    statement."""
    match = _TIME_ZONE.match(sql)
    if match:
        return "timezone", setting_value(match.group("value"))
    match = _SET.match(sql)
    if match:
        return match.group("name").lower(), setting_value(match.group("value"))
    match = _RESET.match(sql)
    if match:
        return match.group("name").lower(), None
    return None


def setting_value(text: str) -> str:
    """A SET's value as text: unquoted, a list's items joined with `, `."""
    items = [i.strip() for i in re.findall(r"'(?:[^']|'')*'|[^,]+", text)]
    return ", ".join(i[1:-1].replace("''", "'") if i.startswith("'") else i for i in items)


def show_name(sql: str) -> str | None:
    match = _SHOW.match(sql)
    return match.group("name").lower() if match else None
