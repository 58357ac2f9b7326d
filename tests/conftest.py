"""Shared pytest options: `--rewrite` regenerates golden files from actual output."""


def pytest_addoption(parser):
    parser.addoption(
        "--rewrite",
        action="store_true",
        default=False,
        help="rewrite golden files with the actual output instead of comparing",
    )
