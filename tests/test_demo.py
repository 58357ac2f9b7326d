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
    # the dead-letter sink's topic: both bad orders, with Connect's context headers
    assert "key 1005, value \\xff\\xfe not even text" in out
    assert "    __connect.errors.topic: orders" in out
    assert out.count("    __connect.errors.exception.message: Decode error: ") == 2
