"""`sidequest.redis()`: a redis-py client whose plain commands take the direct path (`store.direct`).
It must answer exactly as redis-py does, errors included."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
import redis
from conftest import wait_until
from jobs_for_tests import count_with_sidequest_redis

import sidequest
from sidequest.store.direct import DirectRedis


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
    lambda c: [c.client_setname("job"), c.client_getname(), c.config_get("maxmemory-policy"),
               c.execute_command(b"CONFIG GET", "maxmemory-policy")],
], ids=["counter", "strings", "lists", "hashes", "sorted sets", "sets", "misc", "two-word commands"])
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


def test_a_reply_later_than_the_socket_timeout_fails_the_call_and_the_next_call_connects_afresh(private_redis):
    # the timeout lives in the kernel (SO_RCVTIMEO) on the direct path: it must still be redis-py's
    # TimeoutError after about the socket timeout, and the connection must not be reused
    admin = redis.Redis.from_url(private_redis.url())
    direct = DirectRedis.from_url(private_redis.url(), socket_timeout=0.3)
    assert direct.ping() is True
    sock = direct._lane._idle[0][0]._sock  # the timeout is the kernel's, on a blocking socket
    assert sock.gettimeout() is None
    assert struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)) == (0, 300_000)
    admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    began = time.monotonic()
    try:
        with pytest.raises(redis.TimeoutError, match="Timeout reading from socket"):
            direct.incr("n")
        waited = time.monotonic() - began
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    assert 0.25 <= waited < 5.0
    assert direct.incr("after") == 1  # a new connection: the late reply of the first is not read here
    direct.close()


def test_a_forked_child_connects_afresh_and_never_writes_on_the_parents_connection(redis_url, r):
    direct = DirectRedis.from_url(redis_url)
    direct.client_setname("parent")
    pid = os.fork()
    if pid == 0:  # the child: its first command goes on a connection of its own
        code = 1
        try:
            code = 0 if direct.client_getname() is None and direct.incr("child") == 1 else 1
        finally:
            os._exit(code)  # never back into pytest, whatever happened
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert direct.client_getname() == "parent"  # the parent's connection is untouched
    assert r.get("child") == b"1"
    direct.close()


def test_a_job_gets_the_default_clients_redis(start, client, r, monkeypatch):
    monkeypatch.setattr(sidequest.client.sync_client, "_default", client)  # what `sidequest worker` sets up
    client.push_bulk(count_with_sidequest_redis, [[n] for n in range(20)])
    start()
    wait_until(lambda: r.get("visits") == b"20", 30, 0.05, "20 visits counted")
    assert isinstance(sidequest.redis(), redis.Redis)


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decoded"])
def test_the_async_direct_client_answers_as_redis_asyncio_does(redis_url, decoded):
    """`sidequest.client.async_client.redis()`'s client (`aio.AsyncDirectRedis`): the same replies and errors as
    redis.asyncio's own client, for the calls above."""
    import asyncio

    import redis.asyncio

    from sidequest.client.async_client import AsyncDirectRedis

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
