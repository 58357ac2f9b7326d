"""The conformance run over SQLite's sqllogictest corpus (../shared/conformance, read
unmodified), sampled for CI: every statement and 20 evenly spaced queries per file (about
a minute and a half). The whole run is `./dev conformance`; both print the per-file summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.cli import conformance

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "conformance"


@pytest.mark.conformance
@pytest.mark.skipif(not CORPUS.is_dir(), reason="the conformance corpus is not on this machine")
def test_conformance_sample(spark, capsys) -> None:
    results = conformance.run(CORPUS, sample=20)
    with capsys.disabled():
        print("\n" + conformance.summary(results))
    assert len(results) == 17
    assert not any("crashed" in report for r in results for report in r.reports)
    assert conformance.pass_rate(results) >= 0.95
