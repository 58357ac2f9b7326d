"""No module keeps mutable state of its own: what outlives a statement — streams, sinks,
caches — is owned by a session's storage `Controller`, so two sessions of one process share
nothing by accident and a dropped item leaves nothing behind in a module.

Scanned on the source text: a module-level name bound to a dict, list or set (a literal, a
comprehension or a constructor call) that a function of its module writes — item
assignment or deletion, a mutating method, or a `global` rebinding.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "sluice"
CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
CONSTRUCTORS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "WeakValueDictionary"}
MUTATORS = {
    "append", "extend", "insert", "update", "pop", "popitem", "clear", "add", "discard", "remove",
    "setdefault", "move_to_end", "appendleft",
}  # fmt: skip
# State that belongs to the process, not to a session, with the reason. The embedded
# brokers a process runs (librdkafka mock clusters in its memory) are the process's, as
# its Spark session is; creating a topic on one needs its C handle, which its Kafka
# protocol cannot reach.
PROCESS_STATE = {"kafka/embedded.py": {"_IN_PROCESS"}}


def _mutable_globals(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        func = value.func if isinstance(value, ast.Call) else None
        called = getattr(func, "id", getattr(func, "attr", None))
        if isinstance(value, CONTAINERS) or called in CONSTRUCTORS:
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _written(tree: ast.Module, names: set[str]) -> set[str]:
    written: set[str] = set()
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                written |= set(node.names) & names
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            written |= {
                t.value.id
                for t in targets
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names
            }
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in names
                and node.func.attr in MUTATORS
            ):
                written.add(node.func.value.id)
    return written


def test_no_module_writes_a_container_of_its_own() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name = path.relative_to(SRC).as_posix()
        written = _written(tree, _mutable_globals(tree)) - PROCESS_STATE.get(name, set())
        if written:
            found[name] = sorted(written)
    assert not found, found


def test_the_scan_finds_a_written_module_container() -> None:
    tree = ast.parse("CACHE: dict = {}\nSEEN = set()\ndef f(k):\n    CACHE[k] = 1\n    SEEN.add(k)\n")
    assert _written(tree, _mutable_globals(tree)) == {"CACHE", "SEEN"}
    constant = ast.parse("NAMES = {'a': 1}\ndef f(k):\n    return NAMES[k]\n")
    assert _written(constant, _mutable_globals(constant)) == set()
