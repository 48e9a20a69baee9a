"""The CLI tests' fixture: a command run in-process (click's CliRunner) against the test's Redis."""

import pytest
from click.testing import CliRunner

from sidequest.cli import main


@pytest.fixture
def cli(redis_url, monkeypatch):
    """`cli("stats", "--json")`: run the command in-process against the test's Redis."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(main, list(args))

    return run
