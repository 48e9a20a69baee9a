"""`sidequest.redis()`: a redis-py client whose plain commands take the direct path (`wire`).
It must answer exactly as redis-py does, errors included."""

from __future__ import annotations

import pytest
import redis
from conftest import wait_until
from jobs_for_tests import count_with_sidequest_redis

import sidequest
from sidequest.wire import DirectRedis


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def pair(request, redis_url):
    stock = redis.Redis.from_url(redis_url, decode_responses=request.param)
    direct = DirectRedis.from_url(redis_url, decode_responses=request.param)
    yield stock, direct
    stock.close()
    direct.close()


def both(pair, call):
    stock, direct = pair
    stock.flushdb()
    expected = call(stock)
    stock.flushdb()
    return expected, call(direct)


@pytest.mark.parametrize("call", [
    lambda c: [c.incr("n"), c.incr("n", 5), c.get("n")],
    lambda c: [c.set("k", "v"), c.set("k", "w", nx=True), c.get("k"), c.exists("k"), c.delete("k")],
    lambda c: [c.rpush("l", 1, 2, 3), c.lrange("l", 0, -1), c.lpop("l"), c.llen("l")],
    lambda c: [c.hset("h", mapping={"a": 1, "b": "x"}), c.hgetall("h"), c.hincrby("h", "a", 2)],
    lambda c: [c.zadd("z", {"a": 1.5, "b": 2}), c.zrange("z", 0, -1, withscores=True), c.zscore("z", "b")],
    lambda c: [c.sadd("s", "a", "b"), sorted(c.smembers("s")), c.expire("s", 60), c.ttl("s") > 0],
    lambda c: [c.ping(), c.get("missing"), c.mget("a", "b")],
], ids=["counter", "strings", "lists", "hashes", "sorted sets", "sets", "misc"])
def test_the_direct_client_answers_as_redis_py_does(pair, call):
    expected, got = both(pair, call)
    assert got == expected


def test_errors_are_redis_pys_errors(pair):
    _, direct = pair
    direct.set("text", "x")
    with pytest.raises(redis.ResponseError):
        direct.incr("text")
    with pytest.raises(redis.DataError):
        direct.set("k", None)
    assert direct.get("text") in (b"x", "x")  # and it works on


def test_a_job_gets_the_default_clients_redis(start, client, r, monkeypatch):
    monkeypatch.setattr(sidequest.client, "_default", client)  # what `sidequest worker` sets up
    client.push_bulk(count_with_sidequest_redis, [[n] for n in range(20)])
    start()
    wait_until(lambda: r.get("visits") == b"20", 30, 0.05, "20 visits counted")
    assert isinstance(sidequest.redis(), redis.Redis)


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decoded"])
def test_the_async_direct_client_answers_as_redis_asyncio_does(redis_url, decoded):
    """`sidequest.aio.redis()`'s client (`aio.AsyncDirectRedis`): the same replies and errors as
    redis.asyncio's own client, for the calls above."""
    import asyncio

    import redis.asyncio

    from sidequest.aio import AsyncDirectRedis

    async def run(c):
        out = []
        for calls in (
            lambda: [c.incr("n"), c.incr("n", 5), c.get("n")],
            lambda: [c.set("k", "v"), c.set("k", "w", nx=True), c.get("k"), c.exists("k"), c.delete("k")],
            lambda: [c.rpush("l", 1, 2, 3), c.lrange("l", 0, -1), c.lpop("l"), c.llen("l")],
            lambda: [c.hset("h", mapping={"a": 1, "b": "x"}), c.hgetall("h"), c.hincrby("h", "a", 2)],
            lambda: [c.zadd("z", {"a": 1.5, "b": 2}), c.zrange("z", 0, -1, withscores=True), c.zscore("z", "b")],
            lambda: [c.ping(), c.get("missing"), c.mget("a", "b")],
        ):
            out.append([await step for step in calls()])
        await c.set("text", "x")
        for bad in (lambda: c.incr("text"), lambda: c.set("k", None)):
            try:
                await bad()
            except redis.RedisError as exc:
                out.append(type(exc).__name__)
        await c.flushdb()
        await c.aclose()
        return out

    stock = asyncio.run(run(redis.asyncio.Redis.from_url(redis_url, decode_responses=decoded)))
    direct = asyncio.run(run(AsyncDirectRedis.from_url(redis_url, decode_responses=decoded)))
    assert direct == stock and stock[-2:] == ["ResponseError", "DataError"]
