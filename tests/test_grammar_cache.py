"""The parser kept on disk (`syntax/grammar.py`): a process loads it instead of building
the LALR table, and a damaged or foreign cache file is never trusted — the parser is
built afresh and parses as a freshly built one does."""

from __future__ import annotations

from pathlib import Path

import sluice
from sluice.syntax import grammar

STATEMENT = "CREATE SOURCE s FROM KAFKA CONNECTION k (TOPIC 't') FORMAT TEXT ENVELOPE NONE"


def built(tmp_path: Path, monkeypatch):
    """A parser built as a new process builds it, with its cache under `tmp_path`."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return grammar.parser.__wrapped__()


def files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "sluice").glob("grammar-*.lark"))


def test_a_built_parser_is_kept_and_loaded(tmp_path, monkeypatch) -> None:
    first = built(tmp_path, monkeypatch)
    (kept,) = files(tmp_path)
    stamp = kept.stat().st_mtime_ns
    second = built(tmp_path, monkeypatch)
    assert kept.stat().st_mtime_ns == stamp  # loaded, not rebuilt and rewritten
    assert second.parse(STATEMENT) == first.parse(STATEMENT)


def test_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch) -> None:
    built(tmp_path, monkeypatch)
    (kept,) = files(tmp_path)
    for damage in (b"", kept.read_bytes()[:-100], b"not a hash\n" + kept.read_bytes().split(b"\n", 1)[1]):
        kept.write_bytes(damage)
        parser = built(tmp_path, monkeypatch)
        assert parser.parse(STATEMENT) == grammar.parser().parse(STATEMENT)
        rewritten = kept.stat().st_mtime_ns
        assert kept.read_bytes() != damage
        built(tmp_path, monkeypatch)
        assert kept.stat().st_mtime_ns == rewritten  # sound again: loaded, not rebuilt


def test_an_unwritable_cache_directory_only_costs_the_build(tmp_path, monkeypatch) -> None:
    (tmp_path / "sluice").write_text("a file where the folder would be")
    parser = built(tmp_path, monkeypatch)
    assert parser.parse(STATEMENT) == grammar.parser().parse(STATEMENT)
    assert sluice.parse_one(STATEMENT).to_sql().startswith("CREATE SOURCE s")
