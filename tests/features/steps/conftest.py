"""The steps' tests run on both runners, with in-process workers whose jobs reach the test Redis."""

import pytest

from sidequest.client import sync_client


@pytest.fixture(params=["threads", "asyncio"])
def runner(request):
    return request.param


@pytest.fixture
def worker(start, client, monkeypatch, runner):
    """Start an in-process worker on `runner` whose jobs' `sidequest.step` reaches the test Redis."""
    monkeypatch.setattr(sync_client, "_default", client)
    return lambda **more: start(runner=runner, **more)
