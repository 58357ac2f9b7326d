"""The texts that carry failures across Spark: each is read in one module under
`spark/`, beside what writes it (or, for one raised below Spark, the module that reads it
calls the parser beside its writer), and reads back what a real Spark job failing says.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PySparkException

from sluice.spark.conditions import evaluation_error, refusal, unresolved_function, without_condition
from sluice.spark.guards import failed_run, raising
from sluice.spark.pyspark_code import F

SRC = Path(__file__).resolve().parents[1] / "src" / "sluice"
# What reads a text crossing Spark → the only modules that may use it: functions and
# methods of Spark's exceptions, by name or as a string (`getattr`), besides where they
# are defined …
READERS = {
    "reason_of": {"spark/failures.py"},
    "disk_full_in": {"spark/failures.py"},
    "raise_error": {"spark/guards.py"},
    "getCondition": {"spark/conditions.py"},
    "getMessageParameters": {"spark/conditions.py"},
}
# … and texts looked for, in a string of the code.
TEXTS = {
    "Traceback (most recent call last):": {"spark/failures.py"},
    "USER_RAISED_EXCEPTION": {"spark/guards.py"},
    "sluice guard failed": {"spark/guards.py"},
}


def _uses(tree: ast.AST) -> set[str]:
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(text for text in TEXTS if text in node.value)
            found.add(node.value)
    return found - defined


def test_each_text_crossing_spark_is_read_in_one_module() -> None:
    users: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        for used in _uses(ast.parse(path.read_text(encoding="utf-8"))) & (READERS.keys() | TEXTS.keys()):
            users.setdefault(used, set()).add(path.relative_to(SRC).as_posix())
    assert users == READERS | TEXTS


def _failure(run) -> BaseException:
    with pytest.raises(PySparkException) as info:
        run()
    return info.value


def test_a_guard_that_fails_a_job_is_found_by_its_run(spark) -> None:
    rows = spark.range(3).select(F.when(F.col("id") == 1, F.lit("Decode error: x")).alias("message"))
    failure = _failure(lambda: rows.where(raising(F.col("message"), 7).isNull()).collect())
    assert failed_run(failure) == 7
    assert "sluice guard failed: run 7: Decode error: x" in str(failure)
    # No message, no failure: the rows pass as they are.
    assert rows.where(raising(F.lit(None).cast("string"), 7).isNull()).count() == 3
    # Another `raise_error`, and another failure, are no guard's.
    assert failed_run(_failure(lambda: spark.range(1).select(F.raise_error(F.lit("run 7: x"))).collect())) is None
    assert failed_run(_failure(lambda: spark.sql("SELECT 1 / 0").collect())) is None
    assert failed_run(ValueError("sluice guard failed: run 7: x")) is None


def test_spark_s_own_failures_are_read_in_postgresql_s_words(spark) -> None:
    assert evaluation_error(_failure(lambda: spark.sql("SELECT 1 / 0").collect())) == (
        "Evaluation error: division by zero"
    )
    # The value as written, not as Spark quotes it ('x\\'y\\\\z').
    assert evaluation_error(_failure(lambda: spark.sql("SELECT CAST('x''y\\\\z' AS INT)").collect())) == (
        "Evaluation error: invalid input syntax for type integer: \"x'y\\z\""
    )
    assert evaluation_error(_failure(lambda: spark.sql("SELECT CAST(1e10 AS INT)").collect())) == (
        "Evaluation error: integer out of range"
    )
    unknown = _failure(lambda: spark.sql("SELECT No_Such_Function(1)"))
    assert isinstance(unknown, AnalysisException)
    assert unresolved_function(unknown) == "no_such_function"
    assert evaluation_error(unknown) is None
    missing = _failure(lambda: spark.sql("SELECT * FROM no_such_view"))
    assert unresolved_function(missing) is None
    assert refusal(missing) == (
        "the table or view `no_such_view` cannot be found. Verify the spelling and correctness of the schema and catalog"
    )


def test_a_line_of_spark_s_message_loses_only_its_condition() -> None:
    assert without_condition("[STREAM_FAILED] Query [id = 1] terminated: x") == "Query [id = 1] terminated: x"
    assert without_condition("[A.B_C] words [D] SQLSTATE: 1") == "words [D] SQLSTATE: 1"
    assert without_condition("no condition [X] here") == "no condition [X] here"
