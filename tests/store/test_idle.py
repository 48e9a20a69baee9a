"""Connections the server closed while they sat idle (its `timeout`, a restart, CLIENT KILL, a
proxy's idle cut): the direct path (`store.direct`, `mux`) replaces them before use, as redis-py's pool
does, so a push or a job's own command after a quiet spell just works.

Each test runs on a Redis of its own: `CONFIG SET timeout` and `CLIENT KILL TYPE normal` reach
every client of a server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import redis
from conftest import RedisServer, redis_server_binary, wait_until

import sidequest
import sidequest.client.async_client
import sidequest.client.sync_client
from sidequest import Client, Config
from sidequest.jobs.registry import Registry
from sidequest.store.direct import DirectRedis


@sidequest.job(name="ClosedConnCount", retry=0)
def closed_conn_count(n):
    """Counts its runs through `sidequest.redis()`; no retries: a failed call is a dead job."""
    sidequest.redis().incr("visits")


@sidequest.job(name="ClosedConnAsyncCount", retry=0)
async def closed_conn_async_count(n):
    """A blocking command (a connection of its own), then counts its runs through
    `sidequest.client.async_client.redis()` (the loop's shared connection); no retries."""
    r = sidequest.client.async_client.redis()
    await r.blpop(["nothing-here"], 0.01)
    await r.incr("visits")


def only(*jobs) -> Registry:
    registry = Registry()
    for job in jobs:
        registry.register(job.job_class)
    return registry


@pytest.fixture
def server() -> Iterator[RedisServer]:
    own = RedisServer(redis_server_binary())
    yield own
    own.stop()


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url(1))
    yield client
    client.close()


@pytest.fixture
def config(server: RedisServer) -> Config:
    return Config(redis_url=server.url(1), concurrency=2, timeout=5, fetch_timeout=0.5, poll_interval=0.2,
                  heartbeat_interval=0.5, heartbeat_ttl=3, recovery_interval=1)


@pytest.fixture
def worker(config: Config, monkeypatch: pytest.MonkeyPatch):
    """Start in-process workers on this test's Redis; the jobs' `sidequest.redis()` is theirs."""
    from sidequest.worker.launcher import Launcher

    monkeypatch.setattr(sidequest.client.sync_client, "_default", Client(config))  # what `sidequest worker` sets up

    launchers = []

    def start(**changes):
        registry = changes.pop("registry")
        launcher = Launcher(config.replace(**changes), registry=registry)
        launcher.run()
        launchers.append(launcher)
        return launcher

    yield start
    for launcher in launchers:
        launcher.stop()


def others(admin: redis.Redis, last_command: str) -> list[int]:
    """Ids of the server's other clients whose last command was `last_command`."""
    me = admin.client_id()
    return [c["id"] for c in admin.client_list() if c["id"] != me and c["cmd"] == last_command]


def closed_by_timeout(admin: redis.Redis, last_command: str) -> None:
    """Let Redis close its idle clients (`timeout 1`) and wait until those whose last command was
    `last_command` are gone; the admin connection stays busy, so it stays."""
    assert others(admin, last_command), f"no client whose last command was {last_command}"
    admin.config_set("timeout", 1)
    wait_until(lambda: not others(admin, last_command), timeout=30,
               message=f"Redis to close the {last_command} clients")
    admin.config_set("timeout", 0)


def restart(server: RedisServer) -> None:
    """A restart of Redis (without persistence: it comes back empty)."""
    server.halt()
    server.start()


def kill_all(admin: redis.Redis) -> None:
    """A restart as the clients see it: every connection but the admin's closed by the server."""
    killed = admin.execute_command("CLIENT KILL TYPE normal")
    assert killed, "no connection was killed"


def dead_and_retries(admin: redis.Redis) -> list[dict]:
    return [json.loads(raw) for key in ("dead", "retry") for raw in admin.zrange(key, 0, -1)]


# -- pushes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("close", ["timeout", "client kill", "restart"])
def test_a_push_after_redis_closed_the_idle_connection_succeeds(server, config, admin, close):
    """Issue 28 item 1: with Redis `timeout 1`, a push after a quiet spell raised "Connection
    closed by server." although Redis was up; the same after CLIENT KILL and a restart."""
    client = Client(config)
    client.push(closed_conn_count, [1])
    if close == "timeout":
        closed_by_timeout(admin, "exec")
    elif close == "client kill":
        kill_all(admin)
    else:
        restart(server)
    client.push(closed_conn_count, [2])
    kept = [] if close == "restart" else [[1]]
    assert [json.loads(raw)["args"] for raw in admin.lrange("queue:default", 0, -1)] == [[2], *kept]


@pytest.mark.parametrize("close", ["timeout", "client kill"])
def test_an_asyncio_push_after_redis_closed_the_idle_connection_succeeds(config, admin, close):
    """Issue 28 item 1: the asyncio client's push after Redis closed its idle connection."""

    async def main() -> None:
        async with sidequest.client.async_client.AsyncClient(config) as client:
            await client.push(closed_conn_count, [1])
            # from another thread, as a restart comes: the loop runs meanwhile (redis-py's pool
            # sees the close the loop has read; for one it has not, see the next test)
            await asyncio.to_thread(closed_by_timeout if close == "timeout" else kill_all, admin,
                                    *(["exec"] if close == "timeout" else []))
            await client.push(closed_conn_count, [2])

    asyncio.run(main())
    assert [json.loads(raw)["args"] for raw in admin.lrange("queue:default", 0, -1)] == [[2], [1]]


def test_an_asyncio_push_after_redis_closed_the_connection_while_the_loop_was_busy_succeeds(config, admin):
    """Issue 28 item 1: the close comes while the loop runs synchronous code (a request handler's,
    say), so the loop has not read it when the next push takes the connection."""

    async def main() -> None:
        async with sidequest.client.async_client.AsyncClient(config) as client:
            await client.push(closed_conn_count, [1])
            kill_all(admin)  # synchronous: the loop is blocked until Redis has closed them
            await client.push(closed_conn_count, [2])

    asyncio.run(main())
    assert [json.loads(raw)["args"] for raw in admin.lrange("queue:default", 0, -1)] == [[2], [1]]


# -- a job's own client, outside a worker --------------------------------------------------------------
@pytest.mark.parametrize("close", ["timeout", "client kill", "restart"])
def test_the_direct_client_replaces_a_connection_redis_closed(server, admin, close):
    """Issue 28 item 1: `sidequest.redis()`'s client (`DirectRedis`) after its connection was
    closed by the server: the command runs once, as on redis-py's own client."""
    direct = DirectRedis.from_url(server.url(1))
    try:
        assert direct.incr("n") == 1
        if close == "timeout":
            closed_by_timeout(admin, "incrby")
        elif close == "client kill":
            kill_all(admin)
        else:
            restart(server)
        assert direct.incr("n") == (1 if close == "restart" else 2)
    finally:
        direct.close()


def test_the_loops_shared_connection_is_replaced_when_the_loop_was_busy_as_redis_closed_it(server, admin):
    """Issue 28 item 1: the close arrives while the loop runs a job's synchronous code (the loop
    reads nothing meanwhile): the next commands, shared and blocking, go on fresh connections."""

    async def main() -> list[int]:
        direct = sidequest.client.async_client.connect(server.url(1), direct=True)
        try:
            counts = [await direct.incr("n")]
            await direct.blpop(["nothing-here"], 0.01)
            kill_all(admin)  # synchronous: the loop is blocked until Redis has closed them
            counts.append(await direct.incr("n"))
            await direct.blpop(["nothing-here"], 0.01)
            counts.append(await direct.incr("n"))
            return counts
        finally:
            await direct.aclose()

    assert asyncio.run(main()) == [1, 2, 3]


# -- jobs in a worker ------------------------------------------------------------------------------------
@pytest.mark.parametrize("close", ["timeout", "client kill"])
def test_jobs_commands_after_redis_closed_the_workers_idle_connections_run_once(config, admin, worker, close):
    """Issue 28 item 1: after Redis closed the worker's idle connections (its `timeout`; a restart,
    as CLIENT KILL), jobs calling `sidequest.redis()` ran into "Connection closed by server." (a
    `retry=0` job went straight to dead). They must run, each once."""
    worker(registry=only(closed_conn_count), runner="threads")
    client = Client(config)
    client.push(closed_conn_count, [0])
    wait_until(lambda: admin.get("visits") == b"1", message="the first job")
    if close == "timeout":
        closed_by_timeout(admin, "incrby")
    else:
        kill_all(admin)
    client.push_bulk(closed_conn_count, [[n] for n in range(1, 6)])
    wait_until(lambda: admin.get("visits") == b"6" or dead_and_retries(admin), message="the five jobs")
    assert dead_and_retries(admin) == []
    assert admin.get("visits") == b"6"


@pytest.mark.parametrize("close", ["timeout", "client kill"])
def test_async_jobs_commands_after_redis_closed_the_workers_idle_connections_run_once(config, admin, worker, close):
    """Issue 28 item 1, on the asyncio runner: `sidequest.client.async_client.redis()` after Redis closed the
    worker's idle connections."""
    worker(registry=only(closed_conn_async_count), runner="asyncio")
    client = Client(config)
    client.push(closed_conn_async_count, [0])
    wait_until(lambda: admin.get("visits") == b"1", message="the first job")
    if close == "timeout":
        closed_by_timeout(admin, "blpop")
    else:
        kill_all(admin)
    client.push_bulk(closed_conn_async_count, [[n] for n in range(1, 6)])
    wait_until(lambda: admin.get("visits") == b"6" or dead_and_retries(admin), message="the five jobs")
    assert dead_and_retries(admin) == []
    assert admin.get("visits") == b"6"


def test_a_command_killed_right_after_its_last_use_is_sent_once_more_and_runs_once(server, admin):
    """Issue 28 item 1: a connection closed by the server just after its last call (too soon to
    be looked at before use): the next command finds it closed before any byte of it reached
    Redis, and is sent once more on a new connection; each INCR counts once."""
    direct = DirectRedis.from_url(server.url(1))
    try:
        for n in range(1, 21):
            assert direct.incr("n") == 2 * n - 1
            admin.client_kill_filter(_id=others(admin, "incrby")[0])
            assert direct.incr("n") == 2 * n
    finally:
        direct.close()


def test_a_command_redis_read_before_the_connection_closed_is_not_sent_again(server):
    """Issue 28 item 1: what reached Redis is never sent twice: SHUTDOWN ends the server with no
    reply, after it read the command; the caller gets redis-py's error (not a second try, which
    would say it cannot connect)."""
    direct = DirectRedis.from_url(server.url(1))
    try:
        direct.ping()
        with pytest.raises(redis.ConnectionError, match="Connection closed by server"):
            direct.execute_command("SHUTDOWN", "NOSAVE")
    finally:
        direct.close()
