"""The package layering rules, checked on the source text.

Only `syntax/` imports lark; only `render/` (and the Kafka reader) import pyspark; nothing
a parse touches imports Spark, and `import sluice; sluice.parse(...)` leaves pyspark
unloaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "sluice"
PYSPARK_ALLOWED = ("render/", "kafka/reader")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


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
