"""A `redis+sentinel://` URL that names a plain Redis instead of its Sentinels."""

from __future__ import annotations

import asyncio
import re

import pytest

import sidequest
import sidequest.client.async_client
from sidequest.errors import RedisURLError
from sidequest.store.connection import connect


def plain_as_sentinel(redis_server) -> str:
    return f"redis+sentinel://127.0.0.1:{redis_server.port}/mymaster"


def expected(url: str) -> str:
    return (f"^{re.escape(url)} names a Redis that is not a Sentinel: use redis://127.0.0.1:[0-9]+/0 for it, "
            "or list the Sentinels' addresses \\(port 26379 by default\\)$")


def test_a_sentinel_url_naming_a_plain_redis_says_so_in_one_line(redis_server):
    """Issue 28 item 15: a `redis+sentinel://` URL pointed at a plain Redis said "unknown command
    'SENTINEL', with args beginning with: 'MASTERS'"; it must name the fix, in one line."""
    url = plain_as_sentinel(redis_server)
    with pytest.raises(RedisURLError, match=expected(url)):
        connect(url)
    with pytest.raises(RedisURLError, match=expected(url)):
        sidequest.Client(sidequest.Config(redis_url=url)).push("Anything", [])


def test_the_asyncio_client_says_the_same(redis_server):
    """Issue 28 item 15: the asyncio client raised redis-py's bare ResponseError."""
    url = plain_as_sentinel(redis_server)

    async def main() -> None:
        async with sidequest.client.async_client.AsyncClient(sidequest.Config(redis_url=url)) as client:
            await client.push("Anything", [])

    with pytest.raises(RedisURLError, match=expected(url)):
        asyncio.run(main())
