"""The conformance run: public sqllogictest corpora (SQLite's, in `../shared/conformance/`)
through the sqllogic runner, read unmodified, with a per-file summary and the failures
grouped by kind.

`python -m sluice.cli.conformance [DIR] [--sample K]` (`./dev conformance`) runs every
file under DIR — or a deterministic sample: every statement (later queries depend on
them) and K evenly spaced queries per file — and prints, per file, the records passed,
failed and skipped (skipif/onlyif, after `halt`, sampled out), the pass rate and the
time; then the failure kinds, most frequent first.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from sluice.cli.sqllogic import FileResult, find_files, run_file
from sluice.cli.sqllogic_format import parse

DEFAULT_ROOT = Path("../shared/conformance")
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\b\d+\b")


def run(root: Path, sample: int | None = None, out: TextIO | None = None) -> list[FileResult]:
    """Every file under `root` (`sample`: K queries of each), each with a fresh session;
    a summary line as each ends."""
    results = []
    for path in find_files([root]):
        display = path.relative_to(root).as_posix()
        every = 1
        if sample is not None:
            queries = sum(r.kind == "query" for r in parse(path.read_text(encoding="utf-8")))
            every = max(1, math.ceil(queries / sample))
        result = run_file(path, display=display, every=every)
        results.append(result)
        if out is not None:
            print(_row(result), file=out, flush=True)
    return results


def pass_rate(results: Sequence[FileResult]) -> float:
    """Passed records as a share of the records run."""
    passed = sum(r.passed for r in results)
    ran = passed + sum(r.failed for r in results)
    return passed / ran if ran else 1.0


def failure_kinds(results: Sequence[FileResult]) -> Counter[str]:
    """Failures by kind: the report's summary, with the error's first line when there is
    one, names and numbers blanked so that like failures count together."""
    kinds: Counter[str] = Counter()
    for result in results:
        for report in result.reports:
            lines = report.split("\n")
            kind = lines[0].split(": ", 1)[1]
            error = next((line.strip() for line in lines if line.strip().startswith("ERROR:")), None)
            if error is not None:
                kind = f"{kind}: {_VARYING.sub('…', error.removeprefix('ERROR:').strip())[:100]}"
            kinds[kind] += 1
    return kinds


def _row(result: FileResult) -> str:
    ran = result.passed + result.failed
    rate = f"{100 * result.passed / ran:6.2f}%" if ran else "     -"
    return (
        f"{result.path:40} {result.passed:6} passed {result.failed:5} failed "
        f"{result.skipped:5} skipped {rate} {result.seconds:7.1f}s"
    )


def summary(results: Sequence[FileResult]) -> str:
    """The per-file table, the total, and the failure kinds."""
    total = FileResult(
        "total",
        sum(r.passed for r in results),
        sum(r.failed for r in results),
        sum(r.skipped for r in results),
        seconds=sum(r.seconds for r in results),
    )
    lines = [_row(r) for r in results] + [_row(total)]
    kinds = failure_kinds(results)
    if kinds:
        lines.append("failures by kind:")
        lines += [f"{count:6}  {kind}" for kind, count in kinds.most_common()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.cli.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--sample", type=int, help="run K evenly spaced queries per file (and every statement)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"no conformance corpus at {args.root}", file=sys.stderr)
        return 2
    results = run(args.root, args.sample, out=sys.stdout)
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
