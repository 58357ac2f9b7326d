"""Shared pytest options and fixtures: `--rewrite` regenerates golden files from actual
output; the `spark` marker, which every test that starts Spark carries.

A test gets the marker from the fixtures it uses (`spark`, and any fixture built on it),
so `pytest -m "not spark"` runs the JVM-free tier. A test without the marker cannot start
Java, in its own process or a child (its JAVA_HOME is a directory that does not exist), so
a test that forgets the `spark` fixture fails in that tier, and its report says why.

Hypothesis runs under one of two profiles, chosen by `HYPOTHESIS_PROFILE` (by default
`ci` where `CI` is set, else `random`): `ci` draws the same examples on every run and keeps
no example database, so CI fails only on a change of the tree (`.ci/run` picks it);
`random` draws new examples each run, and replays a failure's first from `.hypothesis/`.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "random"))

# What a test without the `spark` marker finds as JAVA_HOME: Spark's launcher fails on it.
NO_JAVA = "/nonexistent/java-for-a-test-not-marked-spark"


def pytest_addoption(parser):
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite golden files with the actual output instead of comparing",
    )


def pytest_collection_modifyitems(items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        parametrized = callspec is not None and "spark" in callspec.params  # an argument, not the fixture
        if "spark" in getattr(item, "fixturenames", ()) and not parametrized:
            item.add_marker("spark")


@pytest.fixture(autouse=True)
def _java_only_with_spark(request, monkeypatch):
    if request.node.get_closest_marker("spark") is None:
        monkeypatch.setenv("JAVA_HOME", NO_JAVA)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed and item.get_closest_marker("spark") is None and "Java gateway" in str(report.longrepr):
        report.sections.append(
            ("spark marker", "this test starts Spark but is not marked `spark`: give it the `spark` fixture")
        )


@pytest.fixture(scope="session")
def spark():
    """The one local Spark session of the test run (sluice's own, started once)."""
    from sluice.spark.session import spark as shared_spark

    return shared_spark()


@pytest.fixture
def kafka():
    """A fresh embedded Kafka cluster per test."""
    from sluice.kafka.embedded import EmbeddedKafka

    with EmbeddedKafka() as cluster:
        yield cluster
