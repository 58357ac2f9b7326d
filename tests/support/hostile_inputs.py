"""Hostile statements and what each entry point answers them with.

`NESTINGS` builds every construct sluice's SQL can nest (parentheses, subqueries, CASE,
arrays, JSON paths, calls, casts, unary and binary operator chains, set operations, …)
to a given depth: `BRACKETED` those nested by brackets (or CASE), `CHAINS` the rest.
`hostile_statements` adds statements that once crashed a layer below the parser; corrupt
catalogs, malformed schema-registry answers (served by `HostileRegistry`) and
`random_texts` complete the corpus. `outcome` runs one text through an entry point and
names what came back: `ok`, the SQLSTATE of the `SqlError`, or else an internal error or
another exception — which no entry point may answer with. tests/test_hostile_inputs.py
asserts on these and bench/fault_inputs.py counts them.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import sluice
from sluice.errors import InternalError
from sluice.syntax.query import MAX_NESTING

# Depths tried: the deepest a query may nest, one more, and far more than any stack takes.
DEPTHS = (MAX_NESTING, MAX_NESTING + 1, 1_000, 10_000)

# A table the statements read, so that planning gets past name resolution.
SETUP = "CREATE TABLE t (a int, j jsonb, s text)"


def _wrap(open_: str, inner: str, close: str) -> Callable[[int], str]:
    return lambda n: open_ * n + inner + close * n


def _chain(head: str, link: str, tail: str = "") -> Callable[[int], str]:
    return lambda n: head + link * n + tail


# Name → depth → statement nesting that many parentheses, brackets or CASEs: sluice
# takes up to MAX_NESTING and refuses more (54001) before its parser recurses into them.
BRACKETED: dict[str, Callable[[int], str]] = {
    "parentheses": lambda n: "SELECT " + _wrap("(", "a", ")")(n) + " FROM t",
    "scalar subqueries": lambda n: "SELECT " + _wrap("(SELECT ", "a FROM t", ")")(n),
    "IN subqueries": lambda n: "SELECT a FROM t WHERE a IN " + _wrap("(SELECT a FROM t WHERE a IN ", "(1)", ")")(n - 1),
    "derived tables": lambda n: "SELECT * FROM " + _wrap("(SELECT * FROM ", "t", ") AS x")(n),
    "EXISTS": lambda n: "SELECT 1 WHERE " + _wrap("EXISTS (SELECT 1 WHERE ", "true", ")")(n),
    "CTEs": _wrap("WITH x AS (", "SELECT 1 AS a", ") SELECT a FROM x"),
    "CASE": lambda n: "SELECT " + _wrap("CASE WHEN a > 0 THEN ", "a", " END")(n) + " FROM t",
    "ARRAY[]": lambda n: "SELECT " + _wrap("ARRAY[", "1", "]")(n),
    "subscripts": _chain("SELECT j", "[1]", " FROM t"),
    "function calls": lambda n: "SELECT " + _wrap("abs(", "a", ")")(n) + " FROM t",
    "CAST": lambda n: "SELECT " + _wrap("CAST(", "a", " AS int)")(n) + " FROM t",
    "nested set operations": _wrap("(SELECT 1 UNION ", "SELECT 2", ")"),
    "view body": lambda n: "CREATE VIEW v AS SELECT " + _wrap("(", "a", ")")(n) + " FROM t",
    "SUBSCRIBE (query)": lambda n: "SUBSCRIBE " + _wrap("(", "SELECT a FROM t", ")")(n),
    "EXPLAIN": lambda n: "EXPLAIN SELECT " + _wrap("(", "a", ")")(n) + " FROM t",
    "INSERT VALUES": lambda n: "INSERT INTO t (a) VALUES (" + _wrap("(", "1", ")")(n - 1) + ")",
    "UPDATE SET": lambda n: "UPDATE t SET a = " + _wrap("(", "a + 1", ")")(n),
    "DELETE WHERE": lambda n: "DELETE FROM t WHERE " + _wrap("(", "a = 1", ")")(n),
}
# Name → length → a chain of that many operators, casts or items: as deep a tree, with
# no bracket to count. Each is answered (or refused as too deep), never a traceback.
CHAINS: dict[str, Callable[[int], str]] = {
    "jsonb ->": _chain("SELECT j", "->'k'", " FROM t"),
    "jsonb #>": _chain("SELECT j", "#>'{k}'", "->>'k' FROM t"),
    ":: casts": _chain("SELECT a", "::int", " FROM t"),
    "NOT": _chain("SELECT ", "NOT ", "true"),
    "unary minus": _chain("SELECT ", "- ", "a FROM t"),
    "+ chain": lambda n: "SELECT " + " + ".join(["a"] * (n + 1)) + " FROM t",
    "|| chain": lambda n: "SELECT " + " || ".join(["s"] * (n + 1)) + " FROM t",
    "AND/OR chain": lambda n: "SELECT a FROM t WHERE " + " OR ".join(["a = 1 AND s = 'x'"] * (n + 1)),
    "IN list": lambda n: "SELECT a FROM t WHERE a IN (" + ", ".join(map(str, range(n + 1))) + ")",
    "UNION chain": lambda n: " UNION ALL ".join(["SELECT a FROM t"] * (n + 1)),
    "array type": lambda n: "CREATE TABLE u (c int" + "[]" * n + ")",
    "block comments": lambda n: "SELECT 1 " + _wrap("/* ", "x", " */")(n),
}
NESTINGS = {**BRACKETED, **CHAINS}

# Statements that reached a user as a traceback once (each names the layer it broke).
REGRESSIONS = {
    "FROM-first DELETE (planner AttributeError)": "DELETE FROM FROM x",
    "FROM-first subquery": "SELECT * FROM (FROM t)",
    "DELETE from a subquery": "DELETE FROM (SELECT 1)",
    "INSERT DEFAULT VALUES (render KeyError)": "INSERT INTO t DEFAULT VALUES",
    "DELETE … RETURNING": "DELETE FROM t RETURNING a",
    "INSERT … ON CONFLICT": "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING",
    "UPDATE … FROM": "UPDATE t SET a = 1 FROM t AS u",
}


def hostile_statements(depths: tuple[int, ...] = DEPTHS) -> list[tuple[str, str]]:
    """(label, statement) for every nesting at every depth, then the regressions."""
    found = [(f"{name} × {depth}", build(depth)) for name, build in NESTINGS.items() for depth in depths]
    return found + list(REGRESSIONS.items())


# catalog.json contents a session must refuse as corrupt (XX001), leaving them as they are.
CORRUPT_CATALOGS = {
    "not UTF-8": b"\xff\xfe{",
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "items not a list": b'{"format": "sluice-catalog", "version": 1, "next_id": 1, "items": 5}',
}


class HostileRegistry:
    """A schema registry answering every request with one fixed (malformed) body."""

    def __init__(self) -> None:
        self.body = b"{}"
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.send_response(200)
                self.end_headers()
                self.wfile.write(registry.body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


MALFORMED_REGISTRY_ANSWERS = [
    b'{"id": "seven", "schema": "\\"string\\""}',
    b'{"id": true, "schema": "\\"string\\""}',
    b'{"id": 1}',
    b'{"id": 1, "schema": 5}',
    b'{"id": 1, "schema": "not json"}',
    b'{"id": 1, "schema": "{\\"type\\": \\"nonsense\\"}"}',
    b'{"id": 1, "schema": "' + b"[" * 5000 + b'"}',
    b"[1, 2]",
    b'"schema"',
    b"null",
    b"not json at all",
    b"\xff\xfe",
    b"[" * 100_000,
]


_WORDS = [
    "SELECT", "FROM", "WHERE", "CREATE", "SOURCE", "VIEW", "TABLE", "DELETE", "INSERT", "INTO", "UPDATE",
    "SET", "VALUES", "WITH", "AS", "JOIN", "ON", "CASE", "WHEN", "THEN", "END", "ARRAY", "NOT", "IGNORE",
    "ONLY", "ERRORS", "SUBSCRIBE", "EXPLAIN", "SHOW", "DROP", "t", "a", "j", "(", ")", "[", "]", ",", ";",
    "'x'", '"q"', "1", "->", "::", "=", "+", "*", "$$", "--", "/*", "\x00", "\xff",
]


def random_texts(count: int, seed: int = 14) -> list[str]:
    """Arbitrary statement text, the same for a seed: word salads and random characters."""
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        if i % 2:
            texts.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 20))))
        else:
            characters = (chr(rng.choice([rng.randint(0, 127), rng.randint(0, 0x10FFFF)])) for _ in range(rng.randint(0, 30)))
            texts.append("".join(characters).encode("utf-8", "replace").decode())  # no lone surrogates
    return texts


def outcome(run: Callable[[str], object], text: str) -> str:
    """`ok`, the SQLSTATE of the SqlError `run(text)` raised, or what else it raised (a
    defect): an internal error (a bug sluice caught) or any other exception, named."""
    try:
        run(text)
    except InternalError as e:
        return f"internal error: {e.detail}"
    except sluice.SqlError as e:
        return e.code if isinstance(e.code, str) else f"SqlError without SQLSTATE {e.code!r}"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "ok"


def is_answer(result: str) -> bool:
    """Whether an outcome is an answer a user may get: success or an error's SQLSTATE
    (not an internal error)."""
    return result == "ok" or re.fullmatch(r"[0-9A-Z]{5}", result) is not None
