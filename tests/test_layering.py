"""The package layering rules, checked on the source text.

Only `syntax/` imports lark; only `spark/`, `storage/` and `render/` import pyspark; nothing
a parse touches imports Spark, and `import sluice; sluice.parse(...)` leaves pyspark
unloaded. Imports run one way, down the stages — syntax → plan → lower, then Spark itself
(`spark`), what lives for the session (`storage`) and one statement's work (`render`), with
`catalog` and `errors` below them, the session over them, the wire protocol (`pgwire`) over
it and `cli` on top — and no module's imports come back to it. `render` reads plans (the
data of `plan/plans.py`) but never plans or parses; `cli` talks to the session and the
public `sluice` API. No module is over 600 lines.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "sluice"
PYSPARK_ALLOWED = ("spark/", "storage/", "render/")
# Each part of sluice (a package, or a module of the top level) and its floor: a part
# imports only parts on floors below its own.
FLOORS = {
    "errors": 0,
    "values": 0,
    "catalog": 1,
    "syntax": 1,
    "kafka": 2,
    "plan": 2,
    "lower": 3,
    "spark": 4,  # the Spark session, its settings, the renderer's calls, the Kafka data source
    "storage": 5,  # the session's long-running jobs and their data, under one Controller
    "render": 6,  # one statement's work
    "lookups": 6,  # what a statement needs from Kafka and registries before it is planned
    "session": 7,
    "__init__": 8,  # the public API: `import sluice`
    "pgwire": 9,  # `sluice serve`'s protocol, over the session
    "cli": 10,
    "__main__": 11,  # `python -m sluice`
}
# Modules below their package's floor: the message codecs (bytes ↔ values, and the retry
# policy a registry look-up follows), which import nothing of sluice but each other, so the
# format registry (`catalog/formats.py`) can own its decoder and encoder.
MODULE_FLOORS = {
    "kafka.decode": 0,
    "kafka.csv_decode": 0,
    "kafka.json_decode": 0,
    "kafka.json_scan": 0,
    "kafka.avro_decode": 0,
    "kafka.avro_columns": 0,
    "kafka.avro_schema": 0,
    "kafka.encode": 0,
    "kafka.retry": 0,
}
# What cli may import besides itself: the session, the public API and its helpers, and
# the Kafka tools behind `sluice kafka …` and the REPL's `\produce` (a broker, topics,
# message bytes, a consumer, the schema registry: none of them plans or renders), and the
# server behind `sluice serve`.
CLI_ALLOWED = {
    "sluice",
    "sluice.session",
    "sluice.errors",
    "sluice.values",
    "sluice.kafka.embedded",
    "sluice.kafka.encode",
    "sluice.kafka.topics",
    "sluice.kafka.consume",
    "sluice.kafka.registry",
    "sluice.pgwire.server",
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def sluice_imports(path: Path) -> set[str]:
    """The sluice modules `path` imports, anywhere in it (`from sluice.a import b` names
    `sluice.a.b` when that is a module, else `sluice.a`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "sluice")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sluice":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if _source(submodule) is not None else node.module)
    return names


def _source(module: str) -> Path | None:
    base = SRC.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> list[tuple[str, set[str]]]:
    files = sorted(SRC.rglob("*.py"))
    assert files, "no sources found"
    return [(p.relative_to(SRC).as_posix(), imported_modules(p)) for p in files]


def test_only_syntax_imports_lark() -> None:
    offenders = [name for name, imports in modules() if "lark" in imports]
    assert offenders and all(name.startswith("syntax/") for name in offenders), offenders


def test_only_render_imports_pyspark() -> None:
    offenders = [
        name
        for name, imports in modules()
        if "pyspark" in imports and not name.startswith(PYSPARK_ALLOWED)
    ]
    assert not offenders, offenders


def test_parsing_never_loads_spark() -> None:
    code = (
        "import sys, sluice\n"
        "sluice.parse(\"CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT JSON;"
        " SELECT * FROM IGNORE ERRORS s\")\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_package_ships_in_the_wheel() -> None:
    import tomllib

    pyproject = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    on_disk = {
        "sluice" + "".join(f".{p}" for p in init.parent.relative_to(SRC).parts)
        for init in SRC.rglob("__init__.py")
    }
    assert on_disk | {"sluice.grammar"} == listed


def _imports(under: Path = SRC) -> list[tuple[str, str]]:
    """(module, sluice module it imports) for every module under `under`."""
    return [(_module(p), imported) for p in sorted(under.rglob("*.py")) for imported in sluice_imports(p)]


def _floor(module: str) -> int:
    return MODULE_FLOORS.get(".".join(module.split(".")[1:3]), FLOORS[_part(module)])


def test_imports_run_down_the_stages() -> None:
    climbs = [
        f"{module} imports {imported}"
        for module, imported in _imports()
        if _part(imported) != _part(module) and _floor(imported) >= _floor(module)
    ]
    assert not climbs, climbs


def test_render_only_reads_plans() -> None:
    planning = [
        f"{module} imports {imported}"
        for module, imported in _imports(SRC / "render")
        if _part(imported) == "syntax" or (_part(imported) == "plan" and imported != "sluice.plan.plans")
    ]
    assert not planning, planning


def test_cli_talks_to_the_session() -> None:
    reaching = [
        f"{module} imports {imported}"
        for module, imported in _imports(SRC / "cli")
        if _part(imported) != "cli" and imported not in CLI_ALLOWED
    ]
    assert not reaching, reaching


def test_no_module_imports_come_back_to_it() -> None:
    graph = {_module(path): sluice_imports(path) for path in SRC.rglob("*.py")}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the circle


# The longest a module may be: one that grows past it has taken on a second job. The
# syntax tree is one dataclass per grammar rule, whose number the grammar decides.
MOST_LINES = 600
LONGER_ALLOWED = {"syntax/ast.py"}


def test_no_module_is_over_600_lines() -> None:
    long = {
        path.relative_to(SRC).as_posix(): lines
        for path in SRC.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert long.keys() <= LONGER_ALLOWED, long
