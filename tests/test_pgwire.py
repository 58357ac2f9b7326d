"""`sluice serve`: PostgreSQL's wire protocol as clients nobody here wrote speak it —
psycopg 3, asyncpg, pg8000 and psql in a pseudo-terminal — and as a raw socket abuses it
(malformed, truncated and oversized messages, fuzzed).

Catalog-only statements run without Spark; the driver tests share one server whose
session runs queries on the test run's Spark.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.pgwire.server import Server
from sluice.session import Session
from tests.support.spark_jobs import active_jobs, wait_for
from tests.support.terminal import free_port

SRC = Path(__file__).resolve().parents[1] / "src"


@contextlib.contextmanager
def serving(data_dir: Path, **options):
    """A server on a free port over a session on `data_dir`, serving on a thread."""
    with Session(data_dir) as session:
        server = Server(session, port=0, **options)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.stop()
            thread.join(10)


@contextlib.contextmanager
def connected(tmp_path: Path, *setup: str):
    """A raw client, started up, on a server of its own that has run `setup`."""
    with serving(tmp_path / "data") as server:
        raw = Raw(server.address[1])
        raw.startup()
        for sql in setup:
            raw.query(sql)
        try:
            yield raw
        finally:
            raw.close()


class Raw:
    """A protocol-level client: the messages a server sends, as (type, body)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def startup(self, **params: str) -> list[tuple[str, bytes]]:
        params = {"user": "materialize", **params}
        body = struct.pack("!i", 196608) + b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()) + b"\0"
        self.send(struct.pack("!i", len(body) + 4) + body)
        return self.until_ready()

    def receive(self) -> tuple[str, bytes] | None:
        """The next message; None when the server closed the connection."""
        head = self._exactly(5)
        if head is None:
            return None
        length = struct.unpack("!i", head[1:])[0]
        return chr(head[0]), self._exactly(length - 4) or b""

    def _exactly(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def until_ready(self) -> list[tuple[str, bytes]]:
        messages = []
        while (message := self.receive()) is not None:
            messages.append(message)
            if message[0] == "Z":
                break
        return messages

    def query(self, sql: str) -> list[tuple[str, bytes]]:
        self.send(message("Q", sql.encode() + b"\0"))
        return self.until_ready()

    def close(self) -> None:
        self.sock.close()


def message(kind: str, body: bytes = b"") -> bytes:
    return kind.encode() + struct.pack("!i", len(body) + 4) + body


def fields(body: bytes) -> dict[str, str]:
    """The fields of an ErrorResponse or NoticeResponse."""
    return {part[:1].decode(): part[1:].decode() for part in body.split(b"\0") if part}


def summary(messages: list[tuple[str, bytes]]) -> list[str]:
    """Messages as readable text: tags, errors' code and message, rows' values."""
    out = []
    for kind, body in messages:
        if kind == "C":
            out.append(f"C {body[:-1].decode()}")
        elif kind in "EN":
            f = fields(body)
            out.append(f"{kind} {f['C']} {f['M']}")
        elif kind == "D":
            count, at, values = struct.unpack("!h", body[:2])[0], 2, []
            for _ in range(count):
                n = struct.unpack("!i", body[at : at + 4])[0]
                values.append(None if n < 0 else body[at + 4 : at + 4 + n].decode())
                at += 4 + max(n, 0)
            out.append(f"D {values}")
        elif kind == "Z":
            out.append(f"Z {body.decode()}")
        else:
            out.append(kind)
    return out


def test_startup_parameters_ssl_refusal_and_backend_key(tmp_path: Path) -> None:
    with serving(tmp_path / "data") as server:
        raw = Raw(server.address[1])
        raw.send(struct.pack("!ii", 8, 80877103))  # SSLRequest, with no TLS configured
        assert raw.sock.recv(1) == b"N"
        messages = raw.startup(database="materialize", application_name="tests", options="-c extra_float_digits=2 --search_path=nope")
        assert messages[0] == ("R", struct.pack("!i", 0))
        statuses = dict(tuple(b.decode().split("\0")[:2]) for k, b in messages if k == "S")
        assert statuses == {
            "application_name": "tests", "client_encoding": "UTF8", "DateStyle": "ISO, MDY",
            "integer_datetimes": "on", "server_version": "9.5.0", "standard_conforming_strings": "on",
            "TimeZone": "UTC", "IntervalStyle": "postgres", "database": "materialize", "search_path": "public",
        }
        (key,) = [b for k, b in messages if k == "K"]
        assert len(key) == 8
        notices = [fields(b)["M"] for k, b in messages if k == "N"]
        assert notices == ['startup setting search_path not set: invalid value for parameter "search_path": "nope"']
        assert messages[-1] == ("Z", b"I")
        assert summary(raw.query("SHOW extra_float_digits")) == ["T", "D ['2']", "C SHOW", "Z I"]
        raw.close()


def test_simple_queries_tags_errors_and_session_variables(tmp_path: Path) -> None:
    with connected(tmp_path) as raw:
        assert summary(raw.query("CREATE TABLE t (a int, b text); SHOW TABLES; CREATE VIEW v AS SELECT a FROM t")) == [
            "C CREATE TABLE", "T", "D ['t', 'table', None]", "C SELECT 1", "C CREATE VIEW", "Z I",
        ]
        assert summary(raw.query("  -- nothing\n ")) == ["I", "Z I"]
        # The first error ends the string's statements.
        assert summary(raw.query("DROP VIEW v; SELECT a FROM nosuch; DROP TABLE t")) == [
            "C DROP VIEW", "E 42704 unknown catalog item 'nosuch'", "Z I",
        ]
        errors = [fields(b) for k, b in raw.query("SHOW TABLES;\nSELECT b FROM tt") if k == "E"]
        assert errors == [{
            "S": "ERROR", "V": "ERROR", "C": "42704", "M": "unknown catalog item 'tt'",
            "H": 'did you mean "t"?', "P": str(len("SHOW TABLES;\nSELECT b FROM ") + 1),
        }]
        errors = [fields(b) for k, b in raw.query("SELECT 'é' FRM t") if k == "E"]
        assert errors[0]["C"] == "42601" and errors[0]["P"] == "16"  # at t: characters (in bytes, 17)
        changed = raw.query("SET application_name TO 'app'")
        assert ("S", b"application_name\0app\0") in changed and summary(changed)[-2:] == ["C SET", "Z I"]
        assert summary(raw.query("SET TimeZone = 'America/New_York'; SET nosuch = 1; RESET application_name; SHOW application_name")) == [
            'E 22023 invalid value for parameter "TimeZone": "America/New_York"', "Z I",
        ]
        assert summary(raw.query("SET nosuch = 1")) == ['E 42704 unrecognized configuration parameter "nosuch"', "Z I"]
        assert summary(raw.query("SET server_version = '16'")) == ['E 55P02 parameter "server_version" cannot be changed', "Z I"]
        assert summary(raw.query("RESET application_name; SHOW application_name")) == ["S", "C RESET", "T", "D ['']", "C SHOW", "Z I"]


def test_read_transactions_as_materialize_has_them(tmp_path: Path) -> None:
    with connected(tmp_path, "CREATE TABLE t (a int)") as raw:
        assert summary(raw.query("BEGIN; SHOW TABLES")) == ["C BEGIN", "T", "D ['t', 'table', None]", "C SELECT 1", "Z T"]
        assert summary(raw.query("INSERT INTO t VALUES (1)")) == ["E 25006 transaction in read-only mode", "Z E"]
        assert summary(raw.query("SHOW TABLES")) == [
            "E 25P02 current transaction is aborted, commands ignored until end of transaction block", "Z E",
        ]
        assert summary(raw.query("COMMIT")) == ["C ROLLBACK", "Z I"]
        assert summary(raw.query("BEGIN; CREATE TABLE u (a int)")) == [
            "C BEGIN", "E 25001 CREATE TABLE cannot be run inside a transaction block", "Z E",
        ]
        assert summary(raw.query("ROLLBACK; ROLLBACK")) == [
            "C ROLLBACK", "N 25P01 there is no transaction in progress", "C ROLLBACK", "Z I",
        ]
        assert summary(raw.query("START TRANSACTION; BEGIN; COMMIT")) == [
            "C START TRANSACTION", "N 25001 there is already a transaction in progress", "C BEGIN", "C COMMIT", "Z I",
        ]


def test_what_is_not_supported_yet_is_0A000_naming_it(tmp_path: Path) -> None:
    with connected(tmp_path, "CREATE TABLE t (a int)") as raw:
        for sql, name in [
            ("COPY t TO STDOUT", "COPY other than COPY (query) TO STDOUT"),
            ("COPY (SUBSCRIBE t) TO STDOUT WITH (FORMAT csv)", "COPY in format csv"),
            ("COPY t FROM STDIN", "COPY other than COPY (query) TO STDOUT"),
            ("SUBSCRIBE t", "SUBSCRIBE over the wire"), ("LISTEN x", "LISTEN"),
            ("SELECT version()", "version()"), ("SELECT relname FROM pg_catalog.pg_class", "pg_catalog"),
            ("SELECT * FROM information_schema.tables", "information_schema"), ("SELECT current_user", "current_user"),
        ]:
            assert summary(raw.query(sql)) == [f"E 0A000 {name} is not supported yet", "Z I"]
        raw.send(message("F", struct.pack("!i", 1234) + b"\0\0\0\0\0\0\0\0"))  # FunctionCall
        assert summary(raw.until_ready()) == ["E 0A000 function call messages are not supported", "Z I"]
        assert summary(raw.query("SHOW TABLES")) == ["T", "D ['t', 'table', None]", "C SELECT 1", "Z I"]


def test_cursors_in_transaction_blocks(tmp_path: Path) -> None:
    with connected(tmp_path, "CREATE TABLE t (a int)", "CREATE TABLE u (a int)") as raw:
        assert summary(raw.query("DECLARE c CURSOR FOR SHOW TABLES")) == [
            "E 25P01 DECLARE CURSOR can only be used in transaction blocks", "Z I",
        ]
        assert summary(raw.query("BEGIN; DECLARE c CURSOR FOR SHOW TABLES; FETCH 1 c; FETCH ALL FROM c; FETCH c")) == [
            "C BEGIN", "C DECLARE CURSOR", "T", "D ['t', 'table', None]", "C FETCH 1",
            "T", "D ['u', 'table', None]", "C FETCH 1", "T", "C FETCH 0", "Z T",
        ]
        assert summary(raw.query("DECLARE c CURSOR FOR SHOW TABLES")) == ['E 42P03 cursor "c" already exists', "Z E"]
        assert summary(raw.query("ROLLBACK; BEGIN; FETCH 1 c")) == [
            "C ROLLBACK", "C BEGIN", 'E 34000 cursor "c" does not exist', "Z E",
        ]
        assert summary(raw.query("ROLLBACK; BEGIN; DECLARE d SCROLL CURSOR FOR SHOW TABLES")) == [
            "C ROLLBACK", "C BEGIN", "E 0A000 DECLARE SCROLL CURSOR is not supported yet", "Z E",
        ]


def test_sqlalchemy_asks_the_catalog_and_hears_it_is_not_there_yet(tmp_path: Path) -> None:
    import sqlalchemy

    with serving(tmp_path / "data") as server:
        engine = sqlalchemy.create_engine(f"postgresql+psycopg://materialize@127.0.0.1:{server.address[1]}/materialize")
        with pytest.raises(sqlalchemy.exc.NotSupportedError, match="pg_catalog is not supported yet"):
            engine.connect()
        engine.dispose()


def test_tls_when_configured_and_a_clean_refusal_when_not(tmp_path: Path) -> None:
    import psycopg

    from sluice.pgwire.server import tls_context

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    with serving(tmp_path / "plain") as server:
        plain = f"host=127.0.0.1 port={server.address[1]} user=materialize"
        with pytest.raises(psycopg.OperationalError, match="server does not support SSL, but SSL was required"):
            psycopg.connect(plain + " sslmode=require")
        with psycopg.connect(plain + " sslmode=prefer") as conn:
            assert not conn.pgconn.ssl_in_use
    with serving(tmp_path / "tls", tls=tls_context(str(cert), str(key))) as server:
        with psycopg.connect(f"host=127.0.0.1 port={server.address[1]} user=materialize sslmode=require", autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SHOW server_version").fetchone() == ("9.5.0",)
            conn.execute("CREATE TABLE secret_things (a int)")
            assert conn.execute("SHOW TABLES").fetchall() == [("secret_things", "table", None)]


def extended(raw: Raw, sql: str, params: list[bytes | None], limit: int = 0, param_types: tuple[int, ...] = ()) -> list[str]:
    """Parse, Bind, Describe (portal) and Execute an unnamed statement, then Sync."""
    raw.send(message("P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", len(param_types)) + b"".join(struct.pack("!i", t) for t in param_types)))
    values = b"".join(struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p for p in params)
    raw.send(message("B", b"\0\0" + struct.pack("!h", 0) + struct.pack("!h", len(params)) + values + struct.pack("!h", 0)))
    raw.send(message("D", b"P\0"))
    raw.send(message("E", b"\0" + struct.pack("!i", limit)))
    if limit:
        raw.send(message("E", b"\0" + struct.pack("!i", 0)))
    raw.send(message("S"))
    return summary(raw.until_ready())


def test_extended_protocol_errors_skip_to_sync(tmp_path: Path) -> None:
    with connected(tmp_path, "CREATE TABLE t (a int)") as raw:
        assert extended(raw, "SHOW TABLES", []) == ["1", "2", "T", "D ['t', 'table', None]", "C SELECT 1", "Z I"]
        # A syntax error at Parse: its position is the client's text's, whatever $1 became.
        raw.send(message("P", b"\0SELECT $1 FRM t\0\0\0"))
        raw.send(message("S"))
        (error,) = [fields(b) for k, b in raw.until_ready() if k == "E"]
        assert (error["C"], error["P"]) == ("42601", "15")
        # Bind of a statement that is not there, then everything up to Sync is skipped.
        raw.send(message("B", b"\0nosuch\0\0\0\0\0\0\0"))
        raw.send(message("E", b"\0\0\0\0\0"))
        raw.send(message("S"))
        assert summary(raw.until_ready()) == ['E 26000 prepared statement "nosuch" does not exist', "Z I"]
        raw.send(message("P", b"\0SELECT $1, $2\0\0\0"))
        raw.send(message("B", b"\0\0\0\0\0\x01\0\0\0\x01x\0\0"))
        raw.send(message("S"))
        assert summary(raw.until_ready()) == [
            "1", 'E 08P01 bind message supplies 1 parameters, but prepared statement "" requires 2', "Z I",
        ]


@pytest.mark.parametrize(
    "data",
    [
        struct.pack("!i", 2**31 - 1) + b"\0\3\0\0",  # a startup packet of 2 GB
        struct.pack("!I", 2**31) + b"\0\3\0\0",  # a length of 2^31: negative as PostgreSQL's int32
        struct.pack("!ii", 8, 1234),  # protocol 0.1234
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["2GB-startup", "length-2^31", "bad-protocol", "http"],
)
def test_bad_startup_packets_end_that_connection_with_fatal(tmp_path: Path, data: bytes) -> None:
    with serving(tmp_path / "data") as server:
        bystander = Raw(server.address[1])
        bystander.startup()
        raw = Raw(server.address[1])
        raw.send(data)
        reply = raw.receive()
        assert reply is not None and reply[0] == "E", reply
        error = fields(reply[1])
        assert error["S"] == "FATAL" and error["C"] in ("08P01", "0A000"), error
        assert raw.receive() is None  # and the connection is closed
        assert summary(bystander.query("SHOW server_version")) == ["T", "D ['9.5.0']", "C SHOW", "Z I"]


@pytest.mark.parametrize(
    "data,text",
    [
        (b"Q" + struct.pack("!I", 2**31) + b"SELECT 1\0", "invalid message length"),
        (b"Q" + struct.pack("!i", 2**30) + b"SELECT 1\0", "invalid message length"),
        (b"Q" + struct.pack("!i", 2), "invalid message length"),
        (b"\x01\x02\x03\x04\x05", "invalid frontend message type 1"),
        (message("P", b"\0SELECT 1"), "invalid string in message"),
        (message("B", b"\0\0\xff\xff"), "invalid message format"),
        (message("Q", b"\xff\xfe\0"), 'invalid byte sequence for encoding "UTF8"'),
        (message("p", b"secret\0"), "unexpected password message"),
    ],
    ids=["2^31", "1GB", "short", "garbage", "unterminated", "negative-count", "not-utf8", "password"],
)
def test_malformed_messages_end_that_connection_with_fatal(tmp_path: Path, data: bytes, text: str) -> None:
    with serving(tmp_path / "data") as server:
        bystander = Raw(server.address[1])
        bystander.startup()
        raw = Raw(server.address[1])
        raw.startup()
        raw.send(data)
        reply = raw.receive()
        assert reply is not None and reply[0] == "E", reply
        assert fields(reply[1]) == {"S": "FATAL", "V": "FATAL", "C": "08P01", "M": text}
        assert raw.receive() is None
        assert summary(bystander.query("SHOW server_version")) == ["T", "D ['9.5.0']", "C SHOW", "Z I"]


def test_connections_past_the_limit_are_refused_with_53300(tmp_path: Path) -> None:
    with serving(tmp_path / "data", max_connections=2) as server:
        first, second = Raw(server.address[1]), Raw(server.address[1])
        first.startup(), second.startup()
        third = Raw(server.address[1])
        (refused,) = third.startup()
        assert refused[0] == "E" and fields(refused[1]) == {
            "S": "FATAL", "V": "FATAL", "C": "53300",
            "M": "creating connection would violate max_connections limit (desired: 3, limit: 2, current: 2)",
        }
        second.send(message("X"))
        second.close()
        deadline = time.monotonic() + 10
        while server.count() > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Raw(server.address[1]).startup()[-1] == ("Z", b"I")


@st.composite
def abuse(draw) -> bytes:
    """Bytes after a valid startup: random, or a valid message's framing broken."""
    kind = draw(st.sampled_from(b"QPBDECSHXFdcfpZ!\x00"))
    body = draw(st.binary(max_size=64))
    length = draw(st.one_of(st.just(len(body) + 4), st.integers(-(2**31), 2**31 - 1)))
    framed = bytes([kind]) + struct.pack("!i", length) + body
    cut = draw(st.integers(0, len(framed)))
    return draw(st.sampled_from([framed, framed[:cut], body]))


def test_fuzzed_messages_get_an_error_or_a_close_and_others_are_served(tmp_path: Path) -> None:
    with serving(tmp_path / "data") as server:
        port = server.address[1]
        bystander = Raw(port)
        bystander.startup()
        answered = []

        @settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
        @given(abuse())
        def check(data: bytes) -> None:
            raw = Raw(port)
            raw.startup()
            with contextlib.suppress(OSError):  # the server may have closed it already
                raw.send(data)
                raw.sock.shutdown(socket.SHUT_WR)  # what it sent is all it will send
            replies = []
            while (reply := raw.receive()) is not None:
                replies.append(reply)
            raw.close()
            # Nothing left unanswered: the server closed the connection (the reads above
            # ended), after an error if the bytes broke the protocol.
            for kind, body in replies:
                assert kind in "EZTDCINSs123tn", (kind, body)
            answered.append(replies)
            assert summary(bystander.query("SHOW server_version")) == ["T", "D ['9.5.0']", "C SHOW", "Z I"]

        check()
        assert len(answered) >= 1000
        assert any(any(k == "E" and fields(b)["S"] == "FATAL" for k, b in r) for r in answered)


# ---- real drivers, with queries on Spark ------------------------------------------------


@pytest.fixture(scope="module")
def server(spark, tmp_path_factory):
    with serving(tmp_path_factory.mktemp("pgwire") / "data") as server:
        yield server


def dsn(server: Server) -> str:
    return f"host=127.0.0.1 port={server.address[1]} user=materialize dbname=materialize"


TYPES_TABLE = (
    "CREATE TABLE typed (i smallint, j int, k bigint, n numeric, r real, d double precision, b boolean,"
    " t text, dt date, ts timestamp, tz timestamptz, js jsonb, u uuid)"
)
TYPES_ROW = (
    "INSERT INTO typed VALUES (1, 2, 3, 1.50, 1.5, 2.25, true, 'x', '2024-01-02', '2024-01-02 03:04:05',"
    " '2024-01-02 03:04:05+00', '{\"a\": [1, 2]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')"
)
TYPED_VALUES = (
    1, 2, 3, Decimal("1.5"), 1.5, 2.25, True, "x", datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 2, 3, 4, 5),
    datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc), {"a": [1, 2]},
    uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
)


def test_psycopg_parameters_prepared_statements_and_binary_results(server) -> None:
    import psycopg

    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.execute(TYPES_TABLE)
        assert conn.execute(TYPES_ROW).statusmessage == "INSERT 0 1"
        conn.execute("INSERT INTO typed (j) VALUES (NULL)")
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            cur.execute("SELECT * FROM typed WHERE j = %s", [2])
            assert [d.type_code for d in cur.description] == [21, 23, 20, 1700, 700, 701, 16, 25, 1082, 1114, 1184, 3802, 2950]
            assert cur.fetchall() == [TYPED_VALUES]
            assert cur.statusmessage == "SELECT 1"
            cur.execute(
                "SELECT INTERVAL '1 day 2 hours' AS iv, TIME '03:04:05.5' AS tm, ROW(1, 'a') AS rec,"
                " CAST(-12.0500 AS numeric) AS n, NULL::int AS nothing"
            )
            assert [d.type_code for d in cur.description] == [1186, 1083, 25, 1700, 23]
            assert cur.fetchall() == [
                (datetime.timedelta(days=1, hours=2), datetime.time(3, 4, 5, 500000), "(1,a)", Decimal("-12.05"), None)
            ]
        query = "SELECT j + %s AS s, %s::text AS greeting FROM typed WHERE t = %s AND dt = %s"
        for n in (1, 2, 3):  # psycopg prepares a statement the second time it runs it
            rows = conn.execute(query, [n, "hi", "x", datetime.date(2024, 1, 2)], prepare=True).fetchall()
            assert rows == [(2 + n, "hi")]
        with pytest.raises(psycopg.errors.UndefinedObject) as raised:
            conn.execute("SELECT * FROM typd WHERE j = %s", [1])
        assert raised.value.diag.statement_position == "15" and raised.value.diag.message_hint == 'did you mean "typed"?'


def test_row_limits_on_execute_suspend_the_portal(server) -> None:
    import psycopg

    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.execute("CREATE TABLE five (a int)")
        conn.execute("INSERT INTO five VALUES (1), (2), (3), (4), (5)")
    raw = Raw(server.address[1])
    raw.startup()
    assert extended(raw, "SELECT a FROM five WHERE a > $1::int ORDER BY a", [b"1"], limit=3) == [
        "1", "2", "T", "D ['2']", "D ['3']", "D ['4']", "s", "D ['5']", "C SELECT 1", "Z I",
    ]
    raw.close()


def test_asyncpg_binary_protocol_and_prepared_statements(server) -> None:
    import asyncpg

    async def talk() -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=server.address[1], user="materialize", database="materialize")
        try:
            await conn.execute("CREATE TABLE pairs (a bigint, b text)")
            await conn.execute("INSERT INTO pairs VALUES (1, 'one'), (2, 'two'), (3, NULL)")
            rows = await conn.fetch("SELECT a, b FROM pairs WHERE a >= $1::bigint ORDER BY a", 2)
            assert [tuple(r) for r in rows] == [(2, "two"), (3, None)]
            statement = await conn.prepare("SELECT a * $1::int AS doubled FROM pairs ORDER BY a")
            assert [(a.name, a.type.name) for a in statement.get_attributes()] == [("doubled", "int8")]
            assert [r["doubled"] for r in await statement.fetch(2)] == [2, 4, 6]
            assert await conn.fetchval("SELECT $1::text || '!'", "hey") == "hey!"
            with pytest.raises(asyncpg.UndefinedObjectError) as raised:
                await conn.fetch("SELECT * FROM pair")
            assert raised.value.position == "15" and raised.value.hint == 'did you mean "pairs"?'
            async with conn.transaction():  # a read transaction
                assert await conn.fetchval("SELECT count(*) FROM pairs") == 3
        finally:
            await conn.close()

    asyncio.run(talk())


def test_pg8000_and_read_only_transactions(server) -> None:
    import pg8000.native

    conn = pg8000.native.Connection("materialize", host="127.0.0.1", port=server.address[1], database="materialize")
    try:
        conn.run("CREATE TABLE notes (id int, body text)")
        conn.run("INSERT INTO notes VALUES (:id, :body)", id=1, body="it's")
        assert conn.run("SELECT id, body FROM notes WHERE body = :b", b="it's") == [[1, "it's"]]
        assert [c["type_oid"] for c in conn.columns] == [23, 25]
        conn.run("BEGIN")
        assert conn.run("SELECT count(*) FROM notes") == [[1]]
        with pytest.raises(pg8000.native.DatabaseError) as raised:
            conn.run("INSERT INTO notes VALUES (2, 'no')")
        assert raised.value.args[0]["C"] == "25006" and raised.value.args[0]["M"] == "transaction in read-only mode"
        conn.run("ROLLBACK")
        assert conn.run("SELECT count(*) FROM notes") == [[1]]
    finally:
        conn.close()


def _long_table(conn) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS wide (n int)")
    if conn.execute("SELECT count(*) FROM wide").fetchone()[0] == 0:
        conn.execute("INSERT INTO wide VALUES " + ", ".join(f"({i})" for i in range(3000)))


LONG_QUERY = "SELECT count(*) FROM wide a, wide b, wide c WHERE a.n + b.n + c.n = -1"


def test_cancel_request_and_a_disconnect_cancel_the_statements_spark_jobs(server, spark) -> None:
    import psycopg

    with psycopg.connect(dsn(server), autocommit=True) as conn:
        _long_table(conn)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                conn.execute(LONG_QUERY)
            except psycopg.Error as e:
                failure.append(e)

        worker = threading.Thread(target=run)
        worker.start()
        assert wait_for(lambda: active_jobs(spark)), "the query started no Spark job"
        began = time.monotonic()
        conn.cancel_safe()
        worker.join(60)
        assert not worker.is_alive()
        assert isinstance(failure[0], psycopg.errors.QueryCanceled)
        assert failure[0].diag.message_primary == "canceling statement due to user request"
        assert wait_for(lambda: not active_jobs(spark), 30)
        print(f"\ncancelled in {time.monotonic() - began:.1f} s")
        assert conn.execute("SELECT count(*) FROM wide").fetchone() == (3000,)  # the connection goes on

    # A client that goes away mid-query: its jobs are cancelled, the server serves on.
    raw = Raw(server.address[1])
    raw.startup()
    raw.send(message("Q", LONG_QUERY.encode() + b"\0"))
    assert wait_for(lambda: active_jobs(spark)), "the query started no Spark job"
    raw.sock.close()
    assert wait_for(lambda: not active_jobs(spark), 30), "the gone client's jobs still run"
    with psycopg.connect(dsn(server), autocommit=True) as conn:
        assert conn.execute("SELECT 1 + 1").fetchone() == (2,)


def test_copy_to_stdout_and_a_subscribe_streaming_changes_until_cancelled(server) -> None:
    import psycopg

    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.execute("CREATE TABLE feed (a int, b text)")
        conn.execute("INSERT INTO feed VALUES (1, 'tab\there')")
        with conn.cursor().copy("COPY (SELECT a, b, NULL::int AS n FROM feed) TO STDOUT") as copy:
            assert list(copy.rows()) == [("1", "tab\there", None)]
        watcher = psycopg.connect(dsn(server), autocommit=True)
        seen: list[tuple] = []

        def produce_then_cancel() -> None:
            assert wait_for(lambda: len(seen) == 1, 120)
            conn.execute("INSERT INTO feed VALUES (2, 'later')")
            assert wait_for(lambda: len(seen) == 2, 120)
            watcher.cancel_safe()

        helper = threading.Thread(target=produce_then_cancel)
        helper.start()
        with pytest.raises(psycopg.errors.QueryCanceled, match="canceling statement due to user request"):
            with watcher.cursor().copy("COPY (SUBSCRIBE feed) TO STDOUT") as copy:
                for row in copy.rows():
                    seen.append(row)
        helper.join(10)
        assert [row[1:] for row in seen] == [("1", "1", "tab\there"), ("1", "2", "later")]
        assert int(seen[0][0]) <= int(seen[1][0])  # mz_timestamp, in milliseconds
        assert watcher.execute("SELECT count(*) FROM feed").fetchone() == (2,)  # the connection goes on
        watcher.close()


def test_server_side_cursors_and_a_subscribe_cursor_fetched_with_a_timeout(server) -> None:
    import psycopg

    with psycopg.connect(dsn(server), autocommit=True) as writer:
        writer.execute("CREATE TABLE counted (a int)")
        writer.execute("INSERT INTO counted VALUES (1), (2), (3)")
        with psycopg.connect(dsn(server)) as conn:  # not autocommit: psycopg opens a transaction
            with conn.cursor(name="server_side") as named:
                named.execute("SELECT a FROM counted WHERE a > %s ORDER BY a", [0])
                assert [d.type_code for d in named.description] == [23]
                assert (named.fetchone(), named.fetchmany(1), named.fetchall()) == ((1,), [(2,)], [(3,)])
            conn.rollback()
            cur = conn.cursor()
            cur.execute("DECLARE s CURSOR FOR SUBSCRIBE counted")
            cur.execute("FETCH ALL s")
            first = cur.fetchall()
            assert [row[1:] for row in first] == [(1, 1), (1, 2), (1, 3)] and cur.statusmessage == "FETCH 3"
            cur.execute("FETCH ALL s WITH (timeout = '1s')")
            assert cur.fetchall() == [] and cur.statusmessage == "FETCH 0"
            later = threading.Timer(2, lambda: writer.execute("INSERT INTO counted VALUES (4)"))
            later.start()
            cur.execute("FETCH 10 s")  # waits for the change
            (change,) = cur.fetchall()
            assert change[1:] == (1, 4) and change[0] >= first[0][0]
            later.join()
            conn.rollback()


def test_queries_run_side_by_side(server) -> None:
    import psycopg

    with psycopg.connect(dsn(server), autocommit=True) as conn:
        conn.execute("CREATE TABLE shared (a int)")
        conn.execute("INSERT INTO shared VALUES (1), (2), (3)")
    results: list = []

    def query(k: int) -> None:
        with psycopg.connect(dsn(server), autocommit=True) as conn:
            results.append(conn.execute("SELECT sum(a) + %s FROM shared", [k]).fetchone()[0])

    threads = [threading.Thread(target=query, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == [6, 7, 8, 9, 10, 11]


JDBC_JAR = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java
JDBC_PROBE = """import java.sql.*;

public class Probe {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/materialize?user=materialize";
        try (Connection conn = DriverManager.getConnection(url)) {
            System.out.println("server " + conn.getMetaData().getDatabaseProductVersion());
            try (Statement s = conn.createStatement()) {
                s.execute("CREATE TABLE jt (id int, name text)");
                System.out.println("inserted " + s.executeUpdate("INSERT INTO jt VALUES (1, 'one'), (2, 'two')"));
            }
            try (PreparedStatement p = conn.prepareStatement("SELECT id, name FROM jt WHERE id > ? ORDER BY id")) {
                for (int round = 0; round < 6; round++) {  // past prepareThreshold (5): a named statement, binary
                    p.setInt(1, round % 2);
                    try (ResultSet rs = p.executeQuery()) {
                        StringBuilder row = new StringBuilder("round " + round + ":");
                        while (rs.next()) row.append(" ").append(rs.getInt(1)).append("=").append(rs.getString(2));
                        System.out.println(row);
                    }
                }
            }
            try (Statement s = conn.createStatement()) {
                s.executeQuery("SELECT nope FROM jt");
            } catch (SQLException e) {
                System.out.println("error " + e.getSQLState() + " " + e.getMessage().replace("\\n", " | "));
            }
        }
    }
}
"""


@pytest.mark.skipif(shutil.which("javac") is None or not JDBC_JAR.exists(), reason="javac or PostgreSQL's JDBC driver is not installed")
def test_jdbc_prepared_statements_past_the_prepare_threshold(server, tmp_path: Path) -> None:
    (tmp_path / "Probe.java").write_text(JDBC_PROBE)
    subprocess.run(["javac", "-cp", str(JDBC_JAR), "Probe.java"], cwd=tmp_path, check=True)
    out = subprocess.run(
        ["java", "-cp", f"{JDBC_JAR}{os.pathsep}{tmp_path}", "Probe", str(server.address[1])],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert out.splitlines() == [
        "server 9.5.0", "inserted 2",
        *[f"round {n}: 1=one 2=two" if n % 2 == 0 else f"round {n}: 2=two" for n in range(6)],
        'error 42703 ERROR: column "nope" does not exist |   Position: 8',
    ]


# ---- psql and `sluice serve` ------------------------------------------------------------

PSQL = shutil.which("psql")


@pytest.mark.spark  # the server it runs starts Spark
@pytest.mark.skipif(PSQL is None, reason="psql (PostgreSQL's client) is not installed")
def test_psql_in_a_terminal_against_sluice_serve(tmp_path: Path, kafka) -> None:
    import pexpect

    from sluice.kafka.embedded import produce

    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    data = tmp_path / "data"
    serve = subprocess.Popen(
        [sys.executable, "-m", "sluice", "serve", "--port", str(port), "--data-dir", str(data), "--broker", kafka.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert serve.stdout.readline() == f"sluice listening on 127.0.0.1:{port}\n"
        kafka.create_topic("events", partitions=1)
        produce(kafka.bootstrap, "events", [(None, b'{"n": %d}' % i) for i in range(5)])
        psql = pexpect.spawn(
            PSQL, ["-h", "127.0.0.1", "-p", str(port), "-U", "materialize", "materialize"],
            env={**os.environ, "PAGER": "cat", "PSQLRC": "/dev/null", "TERM": "dumb"}, encoding="utf-8", timeout=240,
            dimensions=(50, 200),
        )
        psql.expect_exact("materialize=>")

        def run(text: str) -> str:
            psql.sendline(text)
            psql.expect_exact("materialize=> ")
            return psql.before.replace("\r\n", "\n").split("\n", 1)[1].strip("\n")

        assert run("\\conninfo") == (
            f'You are connected to database "materialize" as user "materialize" on host "127.0.0.1" at port "{port}".'
        )
        assert run("CREATE SOURCE events FROM KAFKA CONNECTION kafka (TOPIC 'events') FORMAT JSON;") == "CREATE SOURCE"
        assert run("SELECT count(*) AS n, sum((data->>'n')::int) AS total FROM events;").splitlines() == [
            " n | total ", "---+-------", " 5 |    10", "(1 row)",
        ]
        # \copy (SUBSCRIBE …): the current count, then a change produced meanwhile, until Ctrl-C.
        psql.sendline("\\copy (SUBSCRIBE (SELECT count(*) AS n FROM events)) to stdout")
        psql.expect(r"\d+\t1\t5\r\n", timeout=240)
        produce(kafka.bootstrap, "events", [(None, b'{"n": 5}')])
        psql.expect(r"\d+\t-1\t5\r\n\d+\t1\t6\r\n", timeout=240)
        psql.sendintr()
        psql.expect_exact("materialize=> ", timeout=120)
        assert "canceling statement due to user request" in psql.before
        assert run("SELECT data FROM evnts;").splitlines() == [
            "ERROR:  unknown catalog item 'evnts'", "LINE 1: SELECT data FROM evnts;", "                         ^",
            'HINT:  did you mean "events"?',
        ]
        run("CREATE TABLE wide (n int);")
        run("INSERT INTO wide VALUES " + ", ".join(f"({i})" for i in range(3000)) + ";")
        psql.sendline(LONG_QUERY + ";")
        time.sleep(8)  # Spark is at work on it
        psql.sendintr()  # Ctrl-C: psql sends a CancelRequest
        psql.expect_exact("materialize=> ", timeout=120)
        assert "ERROR:  canceling statement due to user request" in psql.before
        assert run("SELECT 1 AS one;").splitlines() == [" one ", "-----", "   1", "(1 row)"]
        psql.sendline("\\q")
        psql.expect(pexpect.EOF)
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=120)
    assert serve.returncode == 0, err
    assert err.strip().splitlines()[-1] == "sluice stopped"
    with Session(data, check_kafka=False) as reopened:  # the lock was released
        assert [name for name, _ in reopened.relations()] == ["events", "wide"]
