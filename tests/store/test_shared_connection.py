"""The shared connection of an event loop (`mux.Multiplexed`), as `sidequest.client.async_client.redis()` and the
asyncio runner use it: the plain commands of many tasks on one connection, each reply to its
own caller; what may not share a connection (a blocking command) on one of its own; a
cancelled caller, a late reply, a killed connection and a demoted primary each leave the next
call working."""

import asyncio
import contextlib
import time

import pytest
import redis
from conftest import RedisServer, redis_server_binary, wait_until, wait_until_async

from sidequest.client.async_client import AsyncDirectRedis
from sidequest.store.shared_connection import shareable


def ours(admin: redis.Redis) -> list[dict]:
    """The server's clients but `admin` itself (and a replica's link to its primary)."""
    me = admin.client_id()
    return [c for c in admin.client_list(_type="normal") if int(c["id"]) != me]


def test_many_tasks_commands_share_one_connection_and_each_gets_its_own_reply(private_redis):
    admin = redis.Redis.from_url(private_redis.url())
    admin.mset({f"k{i}": i for i in range(300)})

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url())
        values = await asyncio.gather(*[client.get(f"k{i}") for i in range(300)])
        counts = await asyncio.gather(*[client.incr("n") for _ in range(300)])
        connections = len(ours(admin))
        await client.aclose()
        return values, counts, connections

    values, counts, connections = asyncio.run(main())
    assert values == [str(i).encode() for i in range(300)]
    assert sorted(counts) == list(range(1, 301))
    assert connections == 1


def test_a_blocking_command_waits_on_a_connection_of_its_own(private_redis):
    admin = redis.Redis.from_url(private_redis.url())

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url())
        blocked = asyncio.create_task(client.blpop(["nothing"], timeout=10))
        await wait_until_async(lambda: any(c["cmd"] == "blpop" for c in ours(admin)), 10, 0.005, "the BLPOP sent")
        assert await client.incr("n") == 1  # answered while the BLPOP blocks
        assert await client.set("x", "y") is True
        assert not blocked.done()
        admin.rpush("nothing", "v")
        popped = await asyncio.wait_for(blocked, 10)
        await client.aclose()
        return popped

    assert list(asyncio.run(main())) == [b"nothing", b"v"]


def test_a_cancelled_caller_leaves_the_others_their_own_replies(private_redis):
    admin = redis.Redis.from_url(private_redis.url())

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url())
        await client.ping()  # connected
        shared = client._lane.shared
        admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")  # writes wait: their replies too
        try:
            calls = [asyncio.create_task(client.incrby(f"k{i}", i + 1)) for i in range(10)]
            await wait_until_async(lambda: len(shared._calls) == 10 and not shared._out, 10, 0.005, "all ten sent")
            for call in calls[::2]:
                call.cancel()
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        kept = [await call for call in calls[1::2]]
        after = await client.get("k0")
        await client.aclose()
        return kept, after

    kept, after = asyncio.run(main())
    assert kept == [2, 4, 6, 8, 10]  # each INCRBY's own reply: none shifted by a cancelled one
    assert after == b"1"  # the cancelled calls had been sent: they ran, their replies were dropped
    assert [int(admin.get(f"k{i}")) for i in range(10)] == list(range(1, 11))


def test_a_reply_later_than_the_socket_timeout_fails_the_call_and_the_next_call_connects_afresh(private_redis):
    admin = redis.Redis.from_url(private_redis.url())

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url(), socket_timeout=0.3)
        await client.ping()
        admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        began = time.monotonic()
        try:
            with pytest.raises(redis.TimeoutError):
                await client.incr("n")
            waited = time.monotonic() - began
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        after = await client.set("after", 1)
        await client.aclose()
        return waited, after

    waited, after = asyncio.run(main())
    assert 0.25 <= waited < 5.0
    assert after is True


def test_a_killed_connection_fails_what_waits_on_it_and_the_next_call_connects_afresh(private_redis):
    admin = redis.Redis.from_url(private_redis.url())

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url())
        await client.ping()
        admin.client_kill_filter(_type="normal", skipme=True)
        with contextlib.suppress(redis.ConnectionError):  # the loss may be seen before or on this call
            await client.ping()
        value = await client.incr("n")
        await client.aclose()
        return value

    assert asyncio.run(main()) == 1


def test_an_error_reply_is_raised_to_its_caller_alone(private_redis):
    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url())
        await client.set("text", "abc")
        results = await asyncio.gather(client.incr("text"), client.incr("n"), return_exceptions=True)
        await client.aclose()
        return results

    wrong, counted = asyncio.run(main())
    assert isinstance(wrong, redis.ResponseError) and "not an integer" in str(wrong)
    assert counted == 1


def test_a_demoted_primary_raises_readonly_and_drops_the_shared_connection(private_redis):
    replica = RedisServer(redis_server_binary(), ["--replicaof", "127.0.0.1", str(private_redis.port)])
    try:
        admin = redis.Redis.from_url(replica.url())
        wait_until(lambda: admin.info("replication")["master_link_status"] == "up", 20)

        async def main():
            client = AsyncDirectRedis.from_url(replica.url())
            assert await client.ping() is True
            assert len(ours(admin)) == 1
            with pytest.raises(redis.ReadOnlyError):
                await client.incr("n")
            await wait_until_async(lambda: not ours(admin), 10, 0.005,  # the next call would find the primary anew
                                   "the connection to the demoted primary dropped")
            assert await client.get("n") is None  # and it connects again
            await client.aclose()

        asyncio.run(main())
    finally:
        replica.stop()


def test_what_may_share_a_connection():
    assert shareable([("INCR", "n"), (b"GET", "x"), ("evalsha", "abc", 0)])
    for command in ("BLPOP", "blmove", "SELECT", "CLIENT", "MULTI", "WATCH", "SUBSCRIBE", "WAIT"):
        assert not shareable([("GET", "x"), (command, "a")]), command


def test_a_push_message_between_replies_is_no_ones_reply(private_redis):
    """RESP3 (redis-py 8's default): a client-side-caching invalidation arrives on the shared
    connection between replies; the next caller still gets its own reply."""
    admin = redis.Redis.from_url(private_redis.url())
    admin.set("other", "mine")

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url(), protocol=3)
        shared = client._lane.shared
        await client.ping()
        await shared.exchange([("CLIENT", "TRACKING", "ON")])  # on the shared connection itself
        await client.get("tracked")  # now tracked: a write to it sends this connection a push
        admin.set("tracked", "changed")  # its invalidation is on its way before this returns
        got = await client.get("other")
        await client.aclose()
        return got

    assert asyncio.run(main()) == b"mine"


def test_a_caller_cancelled_while_the_connection_is_made_leaves_it_to_the_others(private_redis):
    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url())
        first = asyncio.create_task(client.incr("n"))
        second = asyncio.create_task(client.incr("n"))
        await asyncio.sleep(0)  # both wait for the connection, which is not made yet
        first.cancel()
        counted = await second
        with pytest.raises(asyncio.CancelledError):
            await first
        await client.aclose()
        return counted

    assert asyncio.run(main()) == 1  # the cancelled INCR was never sent


def test_a_reply_that_cannot_be_decoded_is_raised_to_its_caller_and_the_next_call_works(private_redis):
    admin = redis.Redis.from_url(private_redis.url())
    admin.set("latin1", "café".encode("latin-1"))

    async def main():
        client = AsyncDirectRedis.from_url(private_redis.url(), decode_responses=True, socket_timeout=5)
        with pytest.raises(UnicodeDecodeError):
            await client.get("latin1")
        counted = await client.incr("n")
        await client.aclose()
        return counted

    assert asyncio.run(main()) == 1
