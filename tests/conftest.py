"""Shared pytest options: `--rewrite` regenerates golden files from actual output."""


def pytest_addoption(parser):
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite golden files with the actual output instead of comparing",
    )


import pytest


@pytest.fixture(scope="session")
def spark():
    """The one local Spark session of the test run (sluice's own, started once)."""
    from sluice.render.spark import spark as shared_spark

    return shared_spark()


@pytest.fixture
def kafka():
    """A fresh embedded Kafka cluster per test."""
    from sluice.kafka.embedded import EmbeddedKafka

    with EmbeddedKafka() as cluster:
        yield cluster
