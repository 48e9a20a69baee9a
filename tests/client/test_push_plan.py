"""`wait_replicas` on every push path: a push returns only once the replicas asked for hold it,
or raises NotReplicatedError after `wait_timeout`.

A real primary and replica; the replica is frozen with SIGSTOP (as `DEBUG SLEEP` freezes it, on
every Redis version and for exactly as long as the test needs), so no push can be confirmed.
Redis's WAIT counts the writes of the connection it is sent on: a WAIT sent on any other
connection returns at once, "confirmed", whatever the replica holds.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest
import redis
from conftest import STARTUP, RedisServer, redis_server_binary, wait_until
from jobs_for_tests import logged

import sidequest
from sidequest import Config
from sidequest.client.async_client import AsyncClient
from sidequest.client.sync_client import Client
from sidequest.errors import NotReplicatedError

TIMEOUT = 0.5  # wait_timeout of the frozen tests: each must raise after about this long


@contextmanager
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary of the caller's own and a replica of it, in sync."""
    server = RedisServer(redis_server_binary())
    replica = RedisServer(redis_server_binary(), ["--replicaof", "127.0.0.1", str(server.port)])
    try:
        admin = redis.Redis.from_url(replica.url())
        wait_until(lambda: admin.info("replication")["master_link_status"] == "up", STARTUP,
                   message="the replica to sync")
        admin.close()
        yield server, replica
    finally:
        replica.proc.send_signal(signal.SIGCONT)  # a stopped process would not see the TERM
        replica.stop()
        server.stop()


@pytest.fixture
def primary() -> Iterator[tuple[RedisServer, RedisServer]]:
    with replicated() as pair:
        yield pair


@contextmanager
def frozen(server: RedisServer, replica: RedisServer) -> Iterator[None]:
    """The replica stopped, once it has acknowledged everything written so far: it acknowledges
    nothing more until the block ends (so a WAIT can only return 1 for writes made before)."""
    admin = redis.Redis.from_url(server.url())
    admin.set("test:synced", 1)
    admin.delete("test:synced")
    assert admin.execute_command("WAIT", 1, int(STARTUP * 1000)) == 1
    admin.close()
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        replica.proc.send_signal(signal.SIGCONT)


Push = Callable[[], None]


def sync_push(client: Client, stack: ExitStack) -> Push:
    return lambda: client.push(logged, [1])


def sync_push_bulk(client: Client, stack: ExitStack) -> Push:
    return lambda: client.push_bulk(logged, [[1], [2]])


def sync_push_unique(client: Client, stack: ExitStack) -> Push:
    return lambda: client.push(logged, [time.monotonic_ns()], unique_for=60)  # arguments no earlier push claimed


def sync_push_scheduled(client: Client, stack: ExitStack) -> Push:
    return lambda: client.push(logged, [1], in_=60)


def on_a_loop(stack: ExitStack, push: Callable[[AsyncClient], Awaitable[object]], client: Client) -> Push:
    """`push` on one AsyncClient and one event loop, kept for the whole test (as in an app)."""
    runner = stack.enter_context(asyncio.Runner())
    aio = AsyncClient(client=client)
    stack.callback(lambda: runner.run(aio.aclose()))
    return lambda: runner.run(push(aio))  # type: ignore[arg-type]


def async_push(client: Client, stack: ExitStack) -> Push:
    return on_a_loop(stack, lambda aio: aio.push(logged, [1]), client)


def async_push_bulk(client: Client, stack: ExitStack) -> Push:
    return on_a_loop(stack, lambda aio: aio.push_bulk(logged, [[1], [2]]), client)


def async_push_unique(client: Client, stack: ExitStack) -> Push:
    return on_a_loop(stack, lambda aio: aio.push(logged, [time.monotonic_ns()], unique_for=60), client)


def async_perform_async(client: Client, stack: ExitStack) -> Push:
    return on_a_loop(stack, lambda aio: logged.aio.set(client=aio).perform_async(1), client)


def task_add(client: Client, stack: ExitStack) -> Push:
    task = sidequest.Task.create("replicated", client=client)
    return lambda: task.add(logged, 1)


def task_add_bulk(client: Client, stack: ExitStack) -> Push:
    task = sidequest.Task.create("replicated", client=client)
    return lambda: task.add_bulk(logged, [[1], [2]])


def workflow_start(client: Client, stack: ExitStack) -> Push:
    flow = sidequest.workflow("replicated").add("a", logged.s(1)).add("b", logged.s(), after=["a"])
    return lambda: flow.perform_async(client=client)


def chain_start(client: Client, stack: ExitStack) -> Push:
    return lambda: sidequest.chain(logged.s(1), logged.s()).perform_async(client=client)


PATHS: list[Callable[[Client, ExitStack], Push]] = [
    sync_push, sync_push_bulk, sync_push_unique, sync_push_scheduled, async_push, async_push_bulk,
    async_push_unique, async_perform_async, task_add, task_add_bulk, workflow_start, chain_start]


def warm_up(push: Push) -> None:
    """Connections made and the script loaded while the replica answers: a push confirmed (on a
    loaded machine the replica may take longer than the short wait_timeout: tried again)."""
    def confirmed() -> bool:
        try:
            push()
        except NotReplicatedError:
            return False
        return True
    wait_until(confirmed, STARTUP, message="a push the healthy replica confirms")


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
def test_a_push_no_replica_confirms_raises_not_replicated_after_the_wait_timeout(primary, path):
    """Issue 28 item 2: with the replica frozen and wait_replicas=1, every push path (sync and
    asyncio pushes, bulk, unique, Task.add, a workflow's roots) raises NotReplicatedError after
    about wait_timeout; an asyncio push and Task.add said "confirmed" at once (their WAIT went on
    a connection that wrote nothing) and a workflow sent no WAIT at all."""
    server, replica = primary
    client = Client(Config(redis_url=server.url(), wait_replicas=1, wait_timeout=TIMEOUT))
    with ExitStack() as stack:
        push = path(client, stack)
        warm_up(push)
        with frozen(server, replica):
            began = time.monotonic()
            with pytest.raises(NotReplicatedError) as caught:
                push()
            took = time.monotonic() - began
    assert caught.value.replicas == 0 and caught.value.jids
    assert "0 of the 1 replica(s)" in str(caught.value)
    assert TIMEOUT * 0.8 <= took < TIMEOUT + 5, f"raised after {took:.2f} s, not after the WAIT's {TIMEOUT} s"


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
def test_a_push_the_replica_holds_is_confirmed(primary, path):
    """Issue 28 item 2: with a healthy replica each push path returns, and the replica holds
    what it wrote as soon as it returns."""
    server, replica = primary
    client = Client(Config(redis_url=server.url(), wait_replicas=1, wait_timeout=STARTUP))
    held = redis.Redis.from_url(replica.url())
    written = redis.Redis.from_url(server.url())
    with ExitStack() as stack:
        stack.callback(held.close)
        stack.callback(written.close)
        push = path(client, stack)
        for _ in range(2):
            push()
            assert held.dbsize() == written.dbsize() > 0
            for key in written.keys("*"):
                if written.type(key) in (b"list", b"zset"):
                    assert (held.llen(key) if written.type(key) == b"list" else held.zcard(key)) == \
                        (written.llen(key) if written.type(key) == b"list" else written.zcard(key))


def test_without_wait_replicas_a_push_does_not_wait_for_a_frozen_replica(primary):
    """The default (wait_replicas=0) sends no WAIT: a frozen replica slows no push path."""
    server, replica = primary
    client = Client(Config(redis_url=server.url(), wait_timeout=STARTUP))
    with ExitStack() as stack:
        pushes = [path(client, stack) for path in PATHS]
        with frozen(server, replica):
            began = time.monotonic()
            for push in pushes:
                push()
            assert time.monotonic() - began < STARTUP / 2


def test_a_unique_push_after_redis_lost_its_scripts_loads_them_and_still_waits(primary):
    """The plan's reload (SCRIPT LOAD, then the call and its WAIT again, on one connection), on
    both clients: the push is written once, and confirmed, or refused by a frozen replica."""
    server, replica = primary
    admin = redis.Redis.from_url(server.url())
    with ExitStack() as stack:
        stack.callback(admin.close)
        for path in (sync_push_unique, async_push_unique):
            healthy = path(Client(Config(redis_url=server.url(), wait_replicas=1, wait_timeout=STARTUP)), stack)
            healthy()
            admin.script_flush()
            healthy()
            push = path(Client(Config(redis_url=server.url(), wait_replicas=1, wait_timeout=TIMEOUT)), stack)
            warm_up(push)
            with frozen(server, replica):
                admin.script_flush()
                with pytest.raises(NotReplicatedError):
                    push()
        assert admin.llen("queue:default") >= 8 and len(set(admin.lrange("queue:default", 0, -1))) == \
            admin.llen("queue:default")  # each written once
