"""`sluice parse` prints canonical SQL, or the formatted error with exit status 1."""

import subprocess
import sys


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
    )


def test_parse_prints_canonical_sql(tmp_path) -> None:
    script = tmp_path / "s.sql"
    script.write_text("create source s from kafka connection k (topic 't') format text;\nshow sources")
    result = run("parse", str(script))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC = 't') FORMAT TEXT;",
        "SHOW SOURCES;",
    ]


def test_parse_reads_stdin_and_prints_ast() -> None:
    result = run("parse", "--ast", stdin="SHOW COLUMNS FROM orders")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ShowColumns(")


def test_parse_error_exit_status_and_caret() -> None:
    result = run("parse", "-", stdin="SHOW SOURCES;\nDROP SOURCES s")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "ERROR:  Expected one of CONNECTION, INDEX, MATERIALIZED, SECRET, SINK, SOURCE, TABLE or VIEW, "
        "found SOURCES",
        "LINE 2: DROP SOURCES s",
        "             ^",
    ]
    assert "Traceback" not in result.stderr


def test_missing_file_is_a_clear_error(tmp_path) -> None:
    result = run("parse", str(tmp_path / "nope.sql"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_plan_shows_what_a_script_creates(tmp_path) -> None:
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE CONNECTION k TO KAFKA (BROKER 'localhost:9092');\n"
        "CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT JSON WITH (REDIRECT ERRORS = d);\n"
        "SELECT count(*) FROM d;\n"
    )
    result = run("plan", str(script))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "CREATE SOURCE\n  source s\n" in out
    assert "    errors: redirected to dead-letter table d\n" in out
    assert "  dead-letter table d\n" in out
    assert "Query\n  columns: count bigint not null\n" in out


def test_plan_error_names_the_statement() -> None:
    result = run("plan", "-", stdin="SELECT * FROM nowhere")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "ERROR:  unknown catalog item 'nowhere'"


def test_run_prints_each_result_and_stops_at_the_first_error(tmp_path) -> None:
    script = "CREATE TABLE t (a int); SHOW TABLES; SHOW NONSENSE; SHOW COLUMNS FROM t"
    result = run("run", "-c", script, "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "CREATE TABLE",
        " name |  type | source",
        "------+-------+--------",
        " t    | table | NULL  ",
        "(1 row)",
    ]
    assert result.stderr.startswith("ERROR:  Expected one of COLUMNS")


def test_run_keep_going_runs_the_rest_and_still_fails(tmp_path) -> None:
    script = tmp_path / "s.sql"
    script.write_text("SHOW NONSENSE;\nCREATE TABLE t (a int);\nSHOW COLUMNS FROM t;\n")
    result = run("run", str(script), "--keep-going", "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 1
    assert "LINE 1: SHOW NONSENSE" in result.stderr
    assert result.stdout.splitlines()[0] == "CREATE TABLE"
    assert " a    | t        | integer" in result.stdout  # psql shows booleans as t/f
