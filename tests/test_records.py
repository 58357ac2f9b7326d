"""Records on real Spark: the text Spark computes for a record cast to text
(`lower/record_text.py`) is the text sluice prints for the record itself (`values.pg_text`,
PostgreSQL's record_out), whatever its fields — a property over generated records."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice
from sluice.values import pg_text, value_text

# Fields as SQL literals and the values they are: text with every character record_out
# treats specially, integers, booleans and NULL; records nest.
_TEXT = st.text(alphabet=st.sampled_from(list('ab ,"()\\\t{}') + ["é"]), max_size=6)
_SCALARS = st.one_of(
    _TEXT.map(lambda s: ("'" + s.replace("'", "''") + "'", s)),
    st.integers(-(2**31), 2**31 - 1).map(lambda i: (str(i), i)),
    st.booleans().map(lambda b: (str(b).lower(), b)),
    st.just(("NULL::text", None)),
)


def _records(fields):
    return st.lists(fields, min_size=1, max_size=4).map(
        lambda fs: ("ROW(" + ", ".join(sql for sql, _ in fs) + ")", tuple(v for _, v in fs))
    )


RECORDS = st.recursive(_records(_SCALARS), lambda inner: _records(st.one_of(_SCALARS, inner)), max_leaves=8)


@pytest.fixture(scope="module")
def session(spark):
    with sluice.Session() as s:
        yield s


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(RECORDS, min_size=1, max_size=6))
def test_a_record_cast_to_text_is_the_text_it_prints_as(session, records) -> None:
    sql = "SELECT " + ", ".join(f"{r}::text, {r}" for r, _ in records)
    (row,) = session.execute(sql).rows
    for i, (_, value) in enumerate(records):
        cast, record = row[2 * i], row[2 * i + 1]
        assert cast == pg_text(value)
        assert pg_text(record) == pg_text(value)


def test_record_text_in_the_api_and_repl() -> None:
    assert pg_text((1, "a b", None, True, (2, ""))) == '(1,"a b",,t,"(2,"""")")'
    assert value_text((True, "x")) == "(t,x)" and value_text(True) == "true"
