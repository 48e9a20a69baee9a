"""pytest fixtures for testing your own jobs; pytest loads this plugin by itself (entry point
`pytest11`, name `sidequest`; `pytest -p no:sidequest` turns it off) wherever sidequest is
installed.

    def test_receipt(sidequest_fake):            # pushes captured, no Redis
        close_order.perform_async(7)
        sidequest_fake.drain()

    def test_inline(sidequest_inline): ...       # each job runs when pushed

    def test_task(sidequest_redis): ...          # a sidequest.Client on a clean private Redis

Each installs its client as the default one (`sidequest.configure(client=...)`) for the test
and restores the previous one after. `sidequest_redis` uses one redis-server per test session
(`sidequest_redis_server`, started on first use on a free port of 127.0.0.1 and stopped at
the end) and flushes its database 0 before each test. See docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sidequest.client.sync_client import Client, configure, default_client
from sidequest.testing import FakeJobs, PrivateRedis, fake, inline


@pytest.fixture
def sidequest_fake() -> Iterator[FakeJobs]:
    """Capture the test's pushes (see `sidequest.testing.fake`): `.pushed()`, `.drain()`."""
    with fake() as jobs:
        yield jobs


@pytest.fixture
def sidequest_inline() -> Iterator[FakeJobs]:
    """Run each job when the test pushes it (see `sidequest.testing.inline`)."""
    with inline() as jobs:
        yield jobs


@pytest.fixture(scope="session")
def sidequest_redis_server() -> Iterator[PrivateRedis]:
    """A private redis-server for the session (`sidequest.store.dev_server.server_binary()`)."""
    with PrivateRedis() as server:
        yield server


@pytest.fixture
def sidequest_redis(sidequest_redis_server: PrivateRedis) -> Iterator[Client]:
    """A `sidequest.Client` on an empty database of the private server, installed as the
    default client for the test. Its config is the previous default client's (middleware
    included) with `redis_url` pointing at the private server."""
    previous = default_client()
    client = Client(previous.config.replace(redis_url=sidequest_redis_server.url(0)))
    client.redis.flushdb()
    configure(client=client)
    try:
        yield client
    finally:
        configure(client=previous)
        client.redis.close()
