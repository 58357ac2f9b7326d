"""Kafka from the command line, as a user drives it: `sluice kafka serve --port P` in one
process, `produce` from a shell pipe, `consume`, `topics` and `create-topic` in others,
then `sluice run --broker` and the REPL's `\\produce` reading it back with SQL on Spark.
Real processes, a real pseudo-terminal, the real embedded broker; no mocks."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import fastavro
import pexpect
import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from sluice.cli.broker import version
from sluice.kafka.encode import escaped, keyed_message, literal, split_key
from sluice.kafka.topics import control_path
from tests.support.registry import Registry
from tests.support.terminal import Terminal, free_port

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
}
ENV.pop("SLUICE_BROKER", None)
SLUICE = [sys.executable, "-m", "sluice"]


def sluice(*args: str, stdin: str | bytes = "", broker: str | None = None, timeout: float = 60):
    env = ENV if broker is None else {**ENV, "SLUICE_BROKER": broker}
    return subprocess.run([*SLUICE, *args], input=stdin, capture_output=True, timeout=timeout,
                          env=env, text=isinstance(stdin, str))


@pytest.fixture(scope="module")
def served():
    """One `sluice kafka serve --port P` for the module: its address."""
    port = free_port()
    proc = subprocess.Popen([*SLUICE, "kafka", "serve", "--port", str(port)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line == f"kafka listening on 127.0.0.1:{port}\n", proc.stderr.read()
        assert control_path(f"127.0.0.1:{port}").exists()
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()
    assert not control_path(f"127.0.0.1:{port}").exists()


# -- the line format, without Kafka --------------------------------------------------------


@given(st.binary())
def test_escaped_bytes_read_back_as_themselves(data: bytes) -> None:
    text = escaped(data)
    assert literal(text) == data
    assert "\n" not in text and "\t" not in text


@given(st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\\")))
def test_utf8_text_is_printed_as_it_is(text: str) -> None:
    assert escaped(text.encode()) == text


@pytest.mark.parametrize(
    "line, expected",
    [
        ("k:v", (b"k", b"v")),
        ("k:", (b"k", None)),  # a tombstone
        (":v", (None, b"v")),  # a null key
        ("k:a:b", (b"k", b"a:b")),  # split at the first separator
        ("\\xff:\\x00", (b"\xff", b"\x00")),
    ],
)
def test_keyed_lines(line: str, expected) -> None:
    assert keyed_message(line, ":", literal) == expected


def test_a_line_without_its_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="no key separator '->' in the line"):
        split_key("k:v", "->")


# -- the commands against `sluice kafka serve` -----------------------------------------------


def test_serve_listens_on_the_port_it_was_given(served: str) -> None:
    client = Consumer({"bootstrap.servers": served, "group.id": "t"})
    try:
        brokers = client.list_topics(timeout=10).brokers
    finally:
        client.close()
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [served]


def test_a_port_in_use_is_a_clear_error(served: str) -> None:
    taken = sluice("kafka", "serve", "--port", served.rsplit(":", 1)[1])
    assert taken.returncode == 1
    assert taken.stderr == f"ERROR:  cannot listen on {served}: address already in use\n"


def test_produce_from_a_pipe_then_consume(served: str) -> None:
    produced = subprocess.run(
        f"printf 'a:hello\\nb:\\\\xff\\\\x00bad\\nc:\\n:no key\\n\\n' | {' '.join(SLUICE)} kafka produce"
        " lines -K : --create --partitions 3",
        shell=True, capture_output=True, text=True, env={**ENV, "SLUICE_BROKER": served}, timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr == "produced 4 messages to 'lines'\n"
    assert " lines |          3" in sluice("kafka", "topics", broker=served).stdout.splitlines()

    consumed = sluice("kafka", "consume", "lines", "-e", "--from-beginning", "--broker", served)
    assert consumed.returncode == 0, consumed.stderr
    header, *rows = consumed.stdout.splitlines()
    assert header == "partition\toffset\tkey\tvalue\theaders"
    messages = sorted(tuple(row.split("\t")) for row in rows)
    assert [m[2:] for m in sorted(messages, key=lambda m: m[2])] == [
        ("NULL", "no key", ""),
        ("a", "hello", ""),
        ("b", "\\xff\\x00bad", ""),
        ("c", "NULL", ""),  # `c:` is a tombstone
    ]
    assert {m[0] for m in messages} <= {"0", "1", "2"}
    # without --from-beginning only messages after the start count, and -e ends at once
    assert sluice("kafka", "consume", "lines", "-e", broker=served).stdout.splitlines() == [header]


def test_create_topic_through_serve_and_the_errors_around_it(served: str) -> None:
    made = sluice("kafka", "create-topic", "wide", "--partitions", "4", broker=served)
    assert made.returncode == 0 and made.stderr == "created topic 'wide' (4 partitions)\n"
    listed = sluice("kafka", "topics", broker=served).stdout
    assert " wide  |          4" in listed.splitlines()

    again = sluice("kafka", "create-topic", "wide", broker=served)
    assert again.returncode == 1
    assert again.stderr == "ERROR:  cannot create kafka topic 'wide': topic already exists\n"

    missing = sluice("kafka", "produce", "absent", stdin="x\n", broker=served)
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        f"ERROR:  topic 'absent' does not exist on kafka at {served}",
        "HINT:  add --create (and --partitions N) to create it",
    ]
    bad = sluice("kafka", "produce", "wide", "-K", ":", stdin="a:1\nno separator\n", broker=served)
    assert bad.returncode == 1
    assert bad.stderr.splitlines() == [
        "ERROR:  line 2: no key separator ':' in the line",
        "DETAIL:  no separator",
    ]
    to_one = sluice("kafka", "produce", "wide", "--partition", "3", stdin="x\n", broker=served)
    assert to_one.returncode == 0, to_one.stderr
    consumed = sluice("kafka", "consume", "wide", "-e", "--from-beginning", broker=served).stdout
    assert consumed.splitlines()[1:] == ["3\t0\tNULL\tx\t"]  # the bad batch wrote nothing
    assert "Traceback" not in bad.stderr + missing.stderr + again.stderr

    nowhere = sluice("kafka", "topics")
    assert nowhere.returncode == 1
    assert nowhere.stderr.startswith("ERROR:  no kafka broker given\nHINT:  pass --broker HOST:PORT")


def test_avro_lines_registered_in_a_schema_registry(served: str, tmp_path: Path) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}]}
    (tmp_path / "r.avsc").write_text(json.dumps(schema))
    registry = Registry({"other": {"type": "string"}})
    try:
        produced = sluice("kafka", "produce", "avro", "--create", "--format", "avro",
                          "--schema", str(tmp_path / "r.avsc"), "--registry", registry.url,
                          stdin='{"n": 1}\n{"n": 2}\n', broker=served)
        assert produced.returncode == 0, produced.stderr
        assert registry.answered["register"] == 1
        schema_id = registry.subjects["avro-value"][0]
        bad = sluice("kafka", "produce", "avro", "--format", "avro", "--schema",
                     str(tmp_path / "r.avsc"), stdin='{"n": "x"}\n', broker=served)
        assert bad.returncode == 1 and bad.stderr.startswith(
            f"ERROR:  line 1: not a datum of schema {tmp_path / 'r.avsc'} in Avro's JSON encoding")
    finally:
        registry.close()
    assert schema_id == 2
    client = Consumer({"bootstrap.servers": served, "group.id": "t"})
    try:
        client.assign([TopicPartition("avro", 0, 0)])
        values = [m.value() for m in client.consume(2, timeout=10)]
    finally:
        client.close()
    assert [v[:5] for v in values] == [b"\x00\x00\x00\x00\x02"] * 2
    parsed = fastavro.parse_schema(schema)
    assert [fastavro.schemaless_reader(io.BytesIO(v[5:]), parsed) for v in values] == [{"n": 1}, {"n": 2}]


@pytest.mark.spark  # the sluice it runs starts Spark
def test_sluice_run_reads_what_was_produced(served: str) -> None:
    produced = sluice("kafka", "produce", "greetings", "--create", stdin="hello\nworld\n", broker=served)
    assert produced.returncode == 0, produced.stderr
    ran = sluice("run", "--broker", served, "-c",
                 "CREATE SOURCE g FROM KAFKA CONNECTION kafka (TOPIC 'greetings') FORMAT TEXT;"
                 " SELECT text FROM g ORDER BY text;", timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert [line.rstrip() for line in ran.stdout.splitlines()] == [
        "CREATE SOURCE", "  text", "-------", " hello", " world", "(2 rows)"]


# -- sluice run and piped input -------------------------------------------------------------


def test_a_missing_topic_hints_at_how_to_make_it() -> None:
    ran = sluice("run", "--embedded", "-c",
                 "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 'nope') FORMAT TEXT")
    assert ran.returncode == 1
    lines = ran.stderr.splitlines()
    assert lines[0] == "ERROR:  Topic does not exist"
    assert lines[-1] == (
        "HINT:  create it: \\produce nope --create in the REPL, or sluice kafka create-topic nope"
        f" --broker {lines[-2].split('(')[-1].rstrip(')')}"
    )
    without = sluice("run", "-c", "CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 'x') FORMAT TEXT")
    assert without.stderr.startswith("ERROR:  unknown catalog item 'kafka'")


def test_piped_input_exits_non_zero_after_an_error() -> None:
    script = ("\\produce t --create\nk:v\n\\.\n"
              "\\produce t --bogus\nSELECT 'not sql';\n\\.\n"
              "SHOW SOURCES;\n")
    piped = sluice(stdin=script)
    assert piped.returncode == 1
    out = piped.stdout.splitlines()
    assert "PRODUCE 1" in out
    assert "ERROR:  \\produce: unrecognized arguments: --bogus" in out
    assert "not sql" not in piped.stdout  # the refused command's lines were its own
    assert out[-2:] == ["------+------+----------+-------------------", "(0 rows)"]
    fine = sluice(stdin="SHOW SOURCES;\n")
    assert fine.returncode == 0, fine.stdout


def test_version_both_ways() -> None:
    expected = f"sluice {version()}\n"
    assert sluice("--version").stdout == expected
    script = Path(sys.executable).parent / "sluice"
    if script.exists():  # the console script of an installed package
        assert subprocess.run([str(script), "--version"], capture_output=True, text=True).stdout == expected


# -- the REPL ---------------------------------------------------------------------------------


@pytest.mark.spark  # the sluice it runs starts Spark
def test_produce_in_the_repl_then_select(tmp_path: Path) -> None:
    child = pexpect.spawn(
        sys.executable, ["-m", "sluice", "--history-file", str(tmp_path / "history")],
        env={**ENV, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"},
        encoding="utf-8", timeout=60, dimensions=(50, 200),
    )
    try:
        child.expect_exact("sluice=>")
        term = Terminal(child)
        missing = term.run("CREATE SOURCE m FROM KAFKA CONNECTION kafka (TOPIC 'msgs') FORMAT TEXT;")
        assert "HINT:  create it: \\produce msgs --create in the REPL" in missing

        term.type("\\produce msgs --create -K :")
        child.expect_exact("End with a backslash and a period on a line by itself")
        for line in ("k1:first", "k2:second", "\\."):
            child.expect_exact(">>")
            child.send(line + "\r")
        child.expect_exact("PRODUCE 2")
        child.expect_exact("sluice=>")
        assert " msgs  |          1" in term.run("\\topics").splitlines()
        assert term.run(
            "CREATE SOURCE m FROM KAFKA CONNECTION kafka (TOPIC 'msgs')\n"
            "  KEY FORMAT TEXT VALUE FORMAT TEXT INCLUDE KEY;") == "CREATE SOURCE"
        rows = term.run("SELECT key, text FROM m ORDER BY key;", timeout=300)
        assert [line.rstrip() for line in rows.splitlines()[-5:]] == [
            " key |  text", "-----+--------", " k1  | first", " k2  | second", "(2 rows)"]
        child.send("\\q\r")
        child.expect(pexpect.EOF, timeout=30)
    finally:
        if child.isalive():
            child.terminate(force=True)
