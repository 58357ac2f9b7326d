"""pytest plugin: every `*.slt` file under this directory is one test item, run by
`sluice test`'s runner (`sluice.cli.sqllogic.run_file`) against a fresh session and a fresh
embedded Kafka broker. A failing item's message is the runner's report for its file.
`pytest --rewrite` (the option tests/conftest.py defines) rewrites expected results in place.

It lives here, not in tests/conftest.py, because pytest asks a conftest's
`pytest_collect_file` only about files below that conftest's directory.
"""

from __future__ import annotations

import pytest

from sluice.cli.sqllogic import run_file


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".slt":
        return SqllogicFile.from_parent(parent, path=file_path)
    return None


class SqllogicFile(pytest.File):
    def collect(self):
        item = SqllogicItem.from_parent(self, name=self.path.name)
        item.add_marker("spark")  # a session running a file's queries starts Spark
        yield item


class SqllogicFailed(Exception):
    pass


class SqllogicItem(pytest.Item):
    def runtest(self) -> None:
        rewrite = bool(self.config.getoption("rewrite", default=False))
        try:
            display = str(self.path.relative_to(self.config.rootpath))
        except ValueError:
            display = str(self.path)
        result = run_file(self.path, rewrite=rewrite, display=display)
        if result.failed:
            raise SqllogicFailed(result.report)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, SqllogicFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"sqllogic: {self.path.name}"
