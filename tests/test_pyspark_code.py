"""The recording PySpark of EXPLAIN PYSPARK (`spark/pyspark_code.py`) writes Python that
means what was recorded: any argument reads back as itself, and a program's line breaks
never change what it says. JVM-free."""

from __future__ import annotations

import ast
import functools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice.catalog.formats import Csv, Json
from sluice.catalog.types import Column, SqlType
from sluice.spark.pyspark_code import F, recording
from sluice.spark.pyspark_expr import Expr, parts_of
from sluice.spark.pyspark_layout import statement_lines, wrapped
from sluice.storage.sink.encode import RowBytes

scalars = st.one_of(
    st.text(), st.binary(), st.integers(), st.booleans(), st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=12,
)


@given(values)
def test_an_argument_reads_back_as_itself(value) -> None:
    assert eval("".join(parts_of(value)), {}) == value


columns = st.lists(
    st.builds(Column, st.text(max_size=5), st.sampled_from(["integer", "text", "jsonb"]).map(SqlType), st.booleans()),
    max_size=3,
).map(tuple)
steps = st.builds(
    RowBytes,
    st.one_of(st.builds(Json, columns), st.builds(Csv, columns, st.sampled_from([",", ";", "'"]), st.booleans())),
    st.booleans(),
)


@given(steps)
def test_a_python_step_reads_back_as_itself_with_its_imports(step) -> None:
    """A sink's UDF function, printed as the call of its class, imported by its path."""
    with recording() as program:
        written = "".join(parts_of(step))
    namespace: dict = {}
    exec("\n".join(sorted(program.imports)), namespace)
    assert eval(written, namespace) == step


@given(st.lists(st.tuples(st.sampled_from(["where", "select", "alias", "option"]), values), min_size=1, max_size=6))
def test_a_chain_split_into_lines_says_what_it_said(calls) -> None:
    chain = Expr(("spark",))
    for method, argument in calls:
        chain = getattr(chain, method)(argument)
    text = "".join(chain.parts)
    written = "\n".join(statement_lines("frame", text))
    assert ast.dump(ast.parse(written)) == ast.dump(ast.parse(f"frame = {text}"))


def test_a_frame_used_twice_is_bound_once_and_one_used_once_is_inline() -> None:
    with recording() as program:
        reader = program.spark.read.format("sluice_kafka").options(bootstrap="b:1", topic="t")
        raw = reader.option("config_secret", '{"sasl.password": "pw"}').load()
        messages = raw.where(F.col("value").isNotNull())
        oks = messages.select("key")
        errs = messages.select("value")
        program.bind(oks, "oks")
        program.bind(errs, "errs")
    lines = program.lines()
    assert "pw" not in "\n".join(lines) and '"<redacted>"' in "\n".join(lines)
    assert lines[0] == "df1 = ("  # `messages`, used twice, with `raw` inline in it
    assert lines[-1] == 'errs = df1.select("value")'
    assert sum(line.startswith("oks = ") for line in lines) == 1


@functools.cache
def _program() -> list[str]:
    """An EXPLAIN PYSPARK program with long lines: a source's decoding, a join, a guard."""
    with sluice.Session(check_kafka=False) as session:
        session.execute_script(
            "CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092') WITH (VALIDATE = false);"
            "CREATE SOURCE o FROM KAFKA CONNECTION kafka (TOPIC 'o') KEY FORMAT TEXT VALUE FORMAT JSON INCLUDE KEY AS id;"
            "CREATE TABLE c (id text, name text)"
        )
        sql = "EXPLAIN PYSPARK FOR SELECT c.name, count(*) FROM o JOIN c ON o.id = c.id GROUP BY 1"
        return [row[0] for row in session.execute(sql).rows]


@given(st.integers(min_value=60, max_value=160))
@settings(max_examples=60, deadline=None)
def test_a_program_wrapped_at_any_width_is_the_same_program(width):
    """EXPLAIN PYSPARK's lines break where Python lets them: rewrapped at any width, the
    program is the same Python, and a line is longer only for a string it cannot break."""
    program = _program()
    rewrapped = [short for line in program for short in wrapped(line, width)]
    assert ast.dump(ast.parse("\n".join(rewrapped))) == ast.dump(ast.parse("\n".join(program)))
    for line in rewrapped:
        strings = re.findall(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', line)
        assert len(line) <= width or "(" not in line or any(len(s) > width // 4 for s in strings), line
