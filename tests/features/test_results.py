"""The process-wide `result_ttl` default (`Config.result_ttl`): every job of this codebase keeps
its state and return value unless it says otherwise, as a Celery app with a result backend."""

import asyncio
import time

import pytest
from helpers import pttl_and_spent
from jobs_for_tests import compute, plain

import sidequest
from sidequest import AsyncClient, Client, Config, ConfigError, NoResultError


def test_a_jobs_result_is_kept_by_the_configured_default(config, r, start):
    """Issue 30 item 5: a job without the `result_ttl` option kept no result, whatever the
    process said; `Config(result_ttl=...)` is now the default of that option."""
    client = Client(config.replace(result_ttl=120))
    began = time.monotonic()
    jid = client.push(plain, [{"n": 1}])
    pttl, spent = pttl_and_spent(r, f"sidequest:status:{jid}", began)
    assert 120_000 - spent <= pttl <= 120_000
    start()
    assert sidequest.result(jid, timeout=30, client=client) == {"n": 1}


def test_a_jobs_own_result_ttl_wins_and_none_turns_it_off(config, r, start):
    client = Client(config.replace(result_ttl=120))
    own = client.push(compute, [2])  # its own option: 60 s
    off = client.push(plain, [3], result_ttl=None)
    by_name = client.push("Plain", [4])  # a wire name may be another codebase's job: no record it never updates
    assert 0 < r.pttl(f"sidequest:status:{own}") <= 60_000
    assert not r.exists(f"sidequest:status:{off}") and not r.exists(f"sidequest:status:{by_name}")
    start()
    assert sidequest.result(own, timeout=30, client=client) == {"n": 2, "double": 4, "items": [2, None, True]}
    with pytest.raises(NoResultError):
        sidequest.result(off, timeout=30, client=client)


def test_an_asyncio_push_keeps_the_default_too(config, r):
    """The asyncio client builds its payloads with the same code (`Client.build`)."""

    async def push() -> str | None:
        async with AsyncClient(config.replace(result_ttl=90)) as client:
            return await client.push(plain, [5])

    jid = asyncio.run(push())
    assert 0 < r.pttl(f"sidequest:status:{jid}") <= 90_000


def test_the_default_is_off_and_comes_from_the_environment(redis_url):
    assert Config().result_ttl is None
    assert Config.from_env({"SIDEQUEST_RESULT_TTL": "3600"}).result_ttl == 3600.0
    with pytest.raises(ConfigError, match="result_ttl must be a number above 0"):
        Config(result_ttl=0)
