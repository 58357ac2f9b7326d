"""The conformance run over SQLite's sqllogictest corpus (../shared/conformance, read
unmodified), sampled: every statement and 12 evenly spaced queries per file in the default
tier (about 100 s on two cores), 40 in the long one. The whole run is `./dev conformance`;
each prints the per-file summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.cli import conformance

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "conformance"


@pytest.mark.conformance
@pytest.mark.skipif(not CORPUS.is_dir(), reason="the conformance corpus is not on this machine")
@pytest.mark.parametrize("sample", [12, pytest.param(40, marks=pytest.mark.long)])
def test_conformance_sample(spark, capsys, sample) -> None:
    results = conformance.run(CORPUS, sample=sample)
    with capsys.disabled():
        print("\n" + conformance.summary(results))
    assert len(results) == 17
    assert not any("crashed" in report for r in results for report in r.reports)
    assert conformance.pass_rate(results) >= 0.95
