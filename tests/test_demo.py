"""The narrated demo runs end to end on the embedded broker and shows each error path."""

from sluice.cli.demo import main
from sluice.cli.table import format_table


def test_format_table_aligns_like_psql() -> None:
    assert format_table(("name", "n"), [("a", 1), ("bcd", 22), (None, None)]).splitlines() == [
        " name |  n  ",
        "------+------",
        " a    |    1",
        " bcd  |   22",
        " NULL | NULL",
        "(3 rows)",
    ]


def test_demo_accounts_for_every_message(spark, capsys) -> None:
    assert main() == 0
    out = capsys.readouterr().out
    assert " 1006 | {\"amount\":7.25,\"customer\":\"barbara\"}" in out
    assert ("Decode error: Failed to decode JSON: EOF while parsing a value at line 1 column 31 "
            "(original text: {\"customer\": \"alan\", \"amount\": , original bytes:") in out
    # edsger's inline error (a record: its quotes doubled)
    assert "Failed to decode JSON: expected value at line 1 column 10 (original text: {" in out
    assert 'ERROR:  Decode error: Failed to decode UTF-8 (original bytes: "c328")' in out
    assert "ERROR:  multiple timelines within one dataflow are not supported" in out
    assert out.count("(4 rows)") == 5  # orders' columns and rows, customers, the view twice
    # the dead-letter sink's topic as `sluice kafka consume` prints it: both bad orders,
    # with Connect's context headers
    consumed = out.split("$ sluice kafka consume orders-dead --from-beginning -e\n", 1)[1].splitlines()
    assert consumed[0] == "partition\toffset\tkey\tvalue\theaders"
    dead = sorted((line.split("\t") for line in consumed[1:3]), key=lambda fields: fields[2])
    assert [(key, value) for _, _, key, value, _ in dead] == [
        ("1003", '{"customer": "alan", "amount": '), ("1005", "\\xff\\xfe not even text")
    ]
    for _, _, _, _, headers in dead:
        assert headers.startswith("__connect.errors.topic=orders,__connect.errors.partition=")
        assert ",__connect.errors.exception.message=Decode error: Failed to decode JSON: " in headers
    assert "not ingested" in out  # clicks, only queried, has no counters
