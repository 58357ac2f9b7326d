"""The sqllogictest runner (`sluice test`): sqllogic/ passes; failures name file and line;
hashing, sorting, conditions and --rewrite behave as sqllogictest's; the Kafka directives
write exactly the bytes they say; SQLite's corpus parses; how values print."""

from __future__ import annotations

import datetime
import hashlib
import io
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

import sluice
from sluice.cli.main import main
from sluice.cli.sqllogic import FileRunner, find_files, run_file, run_paths
from sluice.cli.sqllogic_format import parse
from sluice.kafka.embedded import EmbeddedKafka
from sluice.values import slt_value

ROOT = Path(__file__).resolve().parent.parent
# CI clones the repository with shared/ beside it (DESIGN: read the corpus from there).
SQLITE_CORPUS = ROOT.parent / "shared" / "conformance" / "sqlite"


def run(path: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_paths([path], out=out, rewrite="--rewrite" in args)
    return code, out.getvalue()


def slt(tmp_path: Path, text: str, name: str = "t.slt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_sluice_test_prints_per_file_summaries_and_a_total(spark, capsys) -> None:
    # pytest runs every sqllogic/ file itself (sqllogic/conftest.py); this checks the CLI.
    files = [ROOT / "sqllogic" / "bytes.slt", ROOT / "sqllogic" / "runner.slt"]
    code = main(["test", *map(str, files)])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[-3:-1]] == [str(f) for f in files]
    assert all(line.endswith(" 0 failed") for line in out[-3:-1]), "\n".join(out)
    assert out[-1].endswith(" passed, 0 failed") and not out[-1].startswith("0 ")
    assert code == 0


def test_a_wrong_expectation_fails_with_file_line_and_diff(spark, tmp_path) -> None:
    path = slt(tmp_path, "statement ok\nSELECT 1\n\n# two rows\nquery I rowsort\nSELECT * FROM (VALUES (1), (2)) AS v(x)\n----\n1\n3\n\nquery I\nSELECT 5\n----\n5\n")
    code, out = run(path)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{path}:5: query result differs"
    assert "    SELECT * FROM (VALUES (1), (2)) AS v(x)" in lines
    assert "  -3" in lines and "  +2" in lines
    assert lines[-2:] == [f"{path}: 2 passed, 1 failed", "2 passed, 1 failed"]


def test_a_wrong_expectation_in_a_corpus_file_fails_sluice_test(spark, tmp_path, capsys) -> None:
    # The acceptance check on a real corpus file (embedded Kafka, Spark): one expected
    # value changed makes `sluice test DIR` exit 1 with file:line and a diff.
    text = (ROOT / "sqllogic" / "bytes.slt").read_text()
    good = "\\x6b31 \\x00ff 0\n"
    assert text.count(good) == 1
    path = tmp_path / "corpus" / "bytes.slt"
    path.parent.mkdir()
    path.write_text(text.replace(good, "\\x6b31 \\x00fe 0\n"))
    lines = text.splitlines()
    header = max(i for i in range(lines.index(good.strip())) if lines[i].startswith("query ")) + 1
    code = main(["test", str(path.parent)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0] == f"{path}:{header}: query result differs"
    assert '    SELECT key, data, "offset" FROM b ORDER BY "offset"' in out
    assert "  -\\x6b31 \\x00fe 0" in out and "  +\\x6b31 \\x00ff 0" in out
    assert out[-1].endswith(" passed, 1 failed")


def test_errors_are_matched_by_regex_search(spark, tmp_path) -> None:
    path = slt(tmp_path, (
        "statement error catalog item\nSELECT * FROM nowhere\n\n"
        "query error ^unknown catalog item 'nowhere'$\nSELECT * FROM nowhere\n\n"
        "statement error\nSELECT * FROM nowhere\n\n"
        "statement error nope\nSELECT * FROM nowhere\n\n"
        "statement error .\nSELECT 1\n\n"
        "statement ok\nSELECT * FROM nowhere\n"
    ))
    code, out = run(path)
    assert code == 1
    assert f"{path}:10: the error does not match" in out
    assert "  expected error matching: nope" in out
    assert "    ERROR:  unknown catalog item 'nowhere'" in out
    assert f"{path}:13: expected an error matching ., but the statement succeeded" in out
    assert f"{path}:16: statement failed" in out
    assert out.endswith("3 passed, 3 failed\n")


def test_pgcode_also_matches_the_sqlstate(tmp_path) -> None:
    """CockroachDB's `error pgcode XXXXX <regex>`; plan-time errors, so no Spark."""
    path = slt(tmp_path, (
        "statement error pgcode 42704 catalog item\nSELECT * FROM nowhere\n\n"
        "query error pgcode 42601\nSHOW NONSENSE\n\n"
        "statement error pgcode 42601 catalog item\nSELECT * FROM nowhere\n"
    ))
    (first, second, third) = parse(path.read_text())
    assert (first.sqlstate, first.pattern) == ("42704", "catalog item")
    assert (second.sqlstate, second.pattern) == ("42601", None)
    code, out = run(path)
    assert code == 1
    assert f"{path}:7: expected SQLSTATE 42601, got 42704" in out
    assert out.endswith("2 passed, 1 failed\n")


def test_hashing_matches_a_hand_computed_md5(spark, tmp_path) -> None:
    digest = hashlib.md5(b"1\na\n2\nb\n3\nc\n").hexdigest()
    query = "query IT nosort\nSELECT * FROM (VALUES (1, 'a'), (2, 'b'), (3, 'c')) AS v(x, y) ORDER BY x\n----\n"
    good = slt(tmp_path, f"hash-threshold 5\n\n{query}6 values hashing to {digest}\n", "good.slt")
    assert run(good) == (0, f"{good}: 1 passed, 0 failed\n1 passed, 0 failed\n")
    # Over the threshold the actual result is shown hashed; a file can hash below it too.
    one = hashlib.md5(b"1\n").hexdigest()
    bad = slt(tmp_path, f"hash-threshold 5\n\n{query}1\na\n2\nb\n3\nd\n\nquery I\nSELECT 1\n----\n1 values hashing to {one}\n", "bad.slt")
    code, out = run(bad)
    assert code == 1
    assert f"  +6 values hashing to {digest}" in out.splitlines()
    assert out.endswith("1 passed, 1 failed\n")


def test_rowsort_and_valuesort_sort_text(spark, tmp_path) -> None:
    values = "SELECT * FROM (VALUES (10, 'b'), (9, 'a'), (1, 'c')) AS v(x, y)"
    path = slt(tmp_path, (
        f"query IT rowsort\n{values}\n----\n1\nc\n10\nb\n9\na\n\n"
        f"query IT valuesort\n{values}\n----\n1\n10\n9\na\nb\nc\n\n"
        f"mode cockroach\n\nquery IT rowsort\n{values}\n----\n1 c\n10 b\n9 a\n\n"
        f"query IT valuesort\n{values}\n----\n1 10\n9 a\nb c\n\n"
        f"query IT nosort\n{values} ORDER BY x DESC\n----\n10  b\n9 a\n1 c\n"
    ))
    assert run(path)[1].endswith("5 passed, 0 failed\n")


def test_skipif_and_onlyif_answer_to_postgresql(spark, tmp_path) -> None:
    path = slt(tmp_path, (
        "skipif postgresql\nstatement ok\nNOT SQL AT ALL\n\n"
        "onlyif sqlite # only there\nquery I\nSELECT 1\n----\n2\n\n"
        "onlyif postgresql\nquery I\nSELECT 1\n----\n1\n\n"
        "skipif mysql\nskipif oracle\nstatement ok\nSELECT 1\n\n"
        "onlyif mssql\nhalt\n\n"
        "onlyif postgresql\nhalt\n\n"
        "statement ok\nNEVER RUN\n"
    ))
    assert run(path) == (0, f"{path}: 2 passed, 0 failed\n2 passed, 0 failed\n")


def test_rewrite_fixes_expectations_and_keeps_every_other_byte(spark, tmp_path) -> None:
    before = (
        "# keep   this\r\n\r\n"
        "query I   rowsort\r\nSELECT * FROM (VALUES (2), (1)) AS v(x)\r\n----\r\n1\r\n3\r\n\r\n"
        "statement count   7\r\nSELECT * FROM (VALUES (1), (2)) AS v(x)\r\n\r\n"
        "mode cockroach\r\n\r\n"
        "query IT\r\nSELECT 1, 'x y'\r\n\r\n"
        "query I colnames\r\nSELECT 5 AS five\r\n----\r\nfive\r\n6\r\n# trailing comment\r\n\r\n"
        "hash-threshold 1\r\n\r\nquery II\r\nSELECT 1, 2\r\n----\r\n1 3\r\n\r\n"
        "query I\r\nSELECT 1\r\n----\r\n1\r\n"
    )
    two = hashlib.md5(b"1\n2\n").hexdigest()
    after = (
        "# keep   this\r\n\r\n"
        "query I   rowsort\r\nSELECT * FROM (VALUES (2), (1)) AS v(x)\r\n----\r\n1\r\n2\r\n\r\n"
        "statement count   2\r\nSELECT * FROM (VALUES (1), (2)) AS v(x)\r\n\r\n"
        "mode cockroach\r\n\r\n"
        "query IT\r\nSELECT 1, 'x y'\r\n----\r\n1 x y\r\n\r\n"
        "query I colnames\r\nSELECT 5 AS five\r\n----\r\nfive\r\n5\r\n# trailing comment\r\n\r\n"
        "hash-threshold 1\r\n\r\nquery II\r\nSELECT 1, 2\r\n----\r\n"
        f"2 values hashing to {two}\r\n\r\n"
        "query I\r\nSELECT 1\r\n----\r\n1\r\n"
    )
    path = tmp_path / "r.slt"
    path.write_bytes(before.encode())
    assert run(path)[0] == 1
    code, out = run(path, "--rewrite")
    assert code == 0 and out.startswith(f"{path}: rewritten\n")
    assert path.read_bytes().decode() == after
    assert run(path) == (0, f"{path}: 6 passed, 0 failed\n6 passed, 0 failed\n")


def test_halt_stops_the_file_and_bad_records_fail(spark, tmp_path) -> None:
    path = slt(tmp_path, "query I\nSELECT 1\n----\n1\n\nquery X?\nSELECT 1\n\nfrobnicate\n\nhalt\n\nstatement ok\nNOT SQL\n")
    code, out = run(path)
    assert code == 1
    assert f"{path}:6: cannot parse record: bad column types 'X?': letters such as T, I, R" in out
    assert f"{path}:9: cannot parse record: unknown record type 'frobnicate'" in out
    assert out.endswith("1 passed, 2 failed\n")


def _consume(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "slt", "enable.auto.commit": False})
    try:
        got = []
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            while len([g for g in got if g[0] == partition]) < high - low:
                message = consumer.poll(10)
                assert message is not None and message.error() is None
                got.append((partition, message.offset(), message.key(), message.value(), message.timestamp()[1]))
        return got
    finally:
        consumer.close()


def test_kafka_directives_write_exactly_the_bytes_they_say(tmp_path) -> None:
    text = (
        "kafka-create-topic name=t partitions=2\n\n"
        'kafka-schema name=r\n{"type": "record", "name": "r", "fields": [\n'
        '  {"name": "a", "type": "long"}, {"name": "b", "type": ["null", "string"]}]}\n\n'
        'kafka-schema name=k\n"string"\n\n'
        "kafka-ingest topic=t partition=1 timestamp=1234\nplain \\xff\\x00 text\n{\"json\": true}\n\n"
        "kafka-ingest topic=t partition=0 timestamp=5 key-format=bytes\nk:v:w\n:no key\ntomb:\n\\x01\\x02:\\x03\n\n"
        "kafka-ingest topic=t partition=0 timestamp=6 key-format=bytes key-terminator=->\na->b:c\n\n"
        'kafka-ingest topic=t partition=0 timestamp=7 key-format=json format=json\n{"id": [1, 2]} {"v": 1}\n"k"\n\n'
        'kafka-ingest topic=t partition=0 timestamp=8 key-format=avro key-schema=k format=avro schema=r\n'
        '"key" {"a": 3, "b": {"string": "x"}}\n"gone"\n\n'
        'kafka-ingest topic=t partition=0 timestamp=9 format=avro schema=r confluent-wire-format=false\n'
        '{"a": -1, "b": null}\n'
    )
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        result = FileRunner("k.slt", text, session, kafka).run()
        assert (result.passed, result.failed) == (9, 0), result.report
        got = _consume(kafka.bootstrap, "t", 2)
    assert got == [
        (0, 0, b"k", b"v:w", 5),
        (0, 1, None, b"no key", 5),
        (0, 2, b"tomb", None, 5),
        (0, 3, b"\x01\x02", b"\x03", 5),
        (0, 4, b"a", b"b:c", 6),
        (0, 5, b'{"id": [1, 2]}', b'{"v": 1}', 7),
        (0, 6, b'"k"', None, 7),
        (0, 7, b"\x00\x00\x00\x00\x02\x06key", b"\x00\x00\x00\x00\x01\x06\x02\x02x", 8),
        (0, 8, b"\x00\x00\x00\x00\x02\x08gone", None, 8),
        (0, 9, None, b"\x01\x00", 9),
        (1, 0, None, b"plain \xff\x00 text", 1234),
        (1, 1, None, b'{"json": true}', 1234),
    ]


def test_kafka_directive_mistakes_are_reported(tmp_path) -> None:
    text = (
        "kafka-create-topic name=t\n\n"
        "kafka-ingest topic=t format=avro schema=missing\n{}\n\n"
        'kafka-schema name=r\n"long"\n\n'
        'kafka-ingest topic=t format=avro schema=r\n"not a long"\n\n'
        "kafka-ingest topic=t key-format=json\nnot json\n\n"
        "kafka-ingest topic=t key-format=bytes\nno terminator\n\n"
        "kafka-ingest topic=t colour=blue\nx\n\n"
        "kafka-create-topic name=t\n\n"
        "kafka-schema name=bad\n{not json\n"
    )
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        result = FileRunner("k.slt", text, session, kafka).run()
    report = result.report
    assert (result.passed, result.failed) == (2, 7), report
    assert "k.slt:3: kafka-ingest: line 4: no kafka-schema named 'missing'" in report
    assert ("k.slt:9: kafka-ingest: line 10: not a datum of schema r in Avro's JSON encoding: "
            "TypeError: an integer is required\n    \"not a long\"") in report
    assert "k.slt:12: kafka-ingest: line 13: the key is not JSON" in report
    assert "k.slt:15: kafka-ingest: line 16: no key separator ':' in the line" in report
    assert "k.slt:18: cannot parse record: kafka-ingest does not take 'colour=blue'" in report
    assert "k.slt:21: kafka-create-topic failed: cannot create kafka topic 't': topic already exists" in report
    assert "k.slt:23: kafka-schema bad: not an Avro schema" in report


def test_kafka_verify_reads_back_what_was_written_and_reports_a_mismatch_as_a_diff() -> None:
    avro = '{"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}'
    text = (
        "kafka-create-topic name=t partitions=2\n\n"
        f"kafka-schema name=r\n{avro}\n\n"
        "kafka-ingest topic=t partition=0 key-format=bytes headers=true\n"
        "a:{\"x\": 1, \"y\": 2}\n  h1=one\n  h2=\\x00two\nb:\n:no key\n\n"
        "kafka-ingest topic=t partition=1 key-format=bytes\nc:\\xff\n\n"
        # in topic order, every header; JSON compared parsed
        "kafka-verify topic=t key-format=bytes format=json headers=all\n"
        "a:{\"y\": 2, \"x\": 1}\n  h1=one\n  h2=\\x00two\nb:\n:no key\nc:\\xff\n\n"
        # sorted, no headers compared
        "kafka-verify topic=t key-format=bytes sort-messages=true\nc:\\xff\n:no key\nb:\na:{\"x\": 1, \"y\": 2}\n\n"
        # line 30: a wrong header value, a missing message
        "kafka-verify topic=t key-format=bytes headers=h1 timeout=1\n"
        "a:{\"x\": 1, \"y\": 2}\n  h1=two\nb:\n:no key\nc:\\xff\nd:extra\n\n"
        # Avro values compare as datums, whatever the schema id of their frame
        "kafka-create-topic name=a\n\n"
        "kafka-ingest topic=a format=avro schema=r\n{\"a\": 7}\n\n"
        "kafka-verify topic=a format=avro schema=r\n{\"a\": 7}\n\n"
        "kafka-verify topic=a format=avro schema=r timeout=1\n{\"a\": 8}\n\n"
        "kafka-verify topic=t sort-messages=maybe\nx\n\n"
        "kafka-verify topic=t\n  h=1\n\n"
    )
    with EmbeddedKafka() as kafka, sluice.Session() as session:
        result = FileRunner("v.slt", text, session, kafka).run()
    report = result.report
    assert (result.passed, result.failed) == (9, 4), report
    assert (
        "v.slt:30: kafka-verify topic=t: the topic's messages differ\n"
        "  expected 5 messages, the topic has 4\n"
        "  --- expected\n  +++ topic t\n  @@ -1,6 +1,5 @@\n"
        '   a:{"x": 1, "y": 2}\n  -  h1=two\n  +  h1=one\n   b:\n   :no key\n   c:\\xff\n  -d:extra'
    ) in report
    assert '  -{"a": 8}\n  +{"a": 7}' in report
    assert "cannot parse record: sort-messages must be true or false" in report
    assert "kafka-verify: line 53: a header line (indented) needs headers= and a message above it" in report


def test_kafka_addr_is_substituted(spark, tmp_path) -> None:
    path = slt(tmp_path, (
        "statement ok\nCREATE CONNECTION k TO KAFKA (BROKER '${kafka-addr}')\n\n"
        "statement error ^Topic does not exist$\nCREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 'gone') FORMAT TEXT\n\n"
        "query T\nSELECT '${kafka-addr}' LIKE '127.0.0.1:%'\n----\ntrue\n"
    ))
    assert run(path)[0] == 0


@pytest.mark.skipif(not SQLITE_CORPUS.is_dir(), reason="SQLite's corpus is not on this machine")
def test_sqlite_corpus_parses() -> None:
    files = find_files([SQLITE_CORPUS])
    assert len(files) == 17
    kinds: Counter[str] = Counter()
    headers: Counter[str] = Counter()
    for path in files:
        text = path.read_text()
        records = parse(text)
        kinds.update(r.name for r in records)
        headers.update(line.split()[0] for line in text.splitlines() if line.startswith(("statement ", "query ")))
        if path.name == "select1.test":
            assert Counter(r.name for r in records) == {"statement ok": 31, "query": 1000}
            queries = [r for r in records if r.kind == "query"]
            assert all(r.expected is not None for r in queries)  # every one has `----`
            assert sum(not r.expected for r in queries) == 28  # empty results
    assert kinds == {
        "query": 9202, "statement ok": 1968, "statement error": 30, "hash-threshold": 12, "halt": 10,
    }
    assert kinds["query"] == headers["query"]
    assert kinds["statement ok"] + kinds["statement error"] == headers["statement"]


def test_sqlite_corpus_runs_record_by_record(spark, tmp_path) -> None:
    """The corpus executes unmodified (whatever sluice does not support yet fails as a
    record, with a report, never as a crash of the runner)."""
    if not SQLITE_CORPUS.is_dir():
        pytest.skip("SQLite's corpus is not on this machine")
    head = (SQLITE_CORPUS / "select1.test").read_text().split("\n\n")[:40]
    path = slt(tmp_path, "\n\n".join(head) + "\n", "select1_head.test")
    result = run_file(path)
    assert result.passed + result.failed == 40
    assert "crashed" not in result.report


def test_slt_value() -> None:
    assert [slt_value(v) for v in (None, "", True, False, b"\x00\xab", '{"a":1}', "x y")] == [
        "NULL", "(empty)", "true", "false", "\\x00ab", '{"a":1}', "x y",
    ]
    assert [slt_value(v, "R") for v in (1, 2.5, Decimal("0.3336"), 1 / 3, None, True)] == [
        "1.000", "2.500", "0.334", "0.333", "NULL", "true",
    ]
    assert [slt_value(v, "I") for v in (7, -7.9, Decimal("3.5"), "12", False, True)] == [
        "7", "-7", "3", "12", "0", "1",
    ]
    # Both runners print text under I as 0; SQLite reads an integer's digits (Materialize: 0)
    assert [slt_value(v, "I") for v in ("abc", "", "1.5", " +12 ", "12abc")] == ["0", "0", "0", "12", "0"]
    # Materialize's cockroach mode prints a float or numeric under R in full
    assert [slt_value(v, "R", "cockroach") for v in (2.5, 2.0, Decimal("0.3336"), 7)] == [
        "2.5", "2", "0.3336", "7.000",
    ]
    assert [slt_value(v, "T") for v in (1.5, 2.0, float("nan"), float("-inf"), 1e20, Decimal("1.50"))] == [
        "1.5", "2", "NaN", "-Infinity", "1e+20", "1.5",
    ]
    ts = datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert slt_value(ts) == "2024-01-02 03:04:05"
    assert slt_value(ts.replace(microsecond=120000)) == "2024-01-02 03:04:05.12"
    assert slt_value(ts.replace(microsecond=1)) == "2024-01-02 03:04:05.000001"
    assert slt_value(ts.replace(tzinfo=datetime.timezone.utc)) == "2024-01-02 03:04:05+00"
    assert slt_value(datetime.date(2024, 1, 2)) == "2024-01-02"
    assert slt_value(("a b", None, 1)) == '("a b",,1)'
    assert slt_value([1, None, ""]) == '{1,NULL,""}'
    # PostgreSQL's record_out doubles quotes and backslashes; array_out escapes them
    assert slt_value(('say "hi"', "a\\b", "NULL", "", "(x)")) == '("say ""hi""","a\\\\b",NULL,"","(x)")'
    assert slt_value(['say "hi"', "a\\b", "NULL"]) == '{"say \\"hi\\"","a\\\\b","NULL"}'
