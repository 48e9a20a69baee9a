"""Producing jobs from asyncio code: push, status and result without blocking the event loop.

    @app.post("/reports")                                   # a FastAPI handler
    async def create_report(spec: Spec) -> dict[str, str | None]:
        jid = await build_report.aio.perform_async(spec.id)
        return {"jid": jid}

    await Resize.aio.perform_in(60, "a.png", 200)
    await build_report.aio.set(queue="urgent").perform_async(7)
    await sidequest.client.async_client.status(jid)                 # 'queued', 'running', 'done', ...
    await sidequest.client.async_client.result(jid, timeout=10)     # the job's return value

Every job has the asyncio twins of its enqueue methods under `.aio`, with the same names and
the same argument types: `perform_async`, `perform_in`, `perform_at`, `perform_bulk`, `set`.
The name `.aio` follows `redis.asyncio`/aiohttp usage and keeps Sidekiq's method names intact,
where a suffix would read `perform_async_async`: in Sidekiq's vocabulary "async" already means
"later, on a worker", not "awaitable".

`AsyncClient` builds payloads with `Client.build` and `Client.prepare` (client middleware,
checks, unique claims and status records included) and sends the same plan (`push_plan`: the
MULTI or script call, and with `wait_replicas` its WAIT on the same connection) on
`redis.asyncio`. The default one belongs to the running event loop and follows
`sidequest.configure` (one per loop: a redis.asyncio connection cannot move between loops).
Under `sidequest.testing.fake()` or `inline()` pushes go to the fake client as the sync ones do.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar, Unpack, cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sidequest.client import plugins, push_plan
from sidequest.client import sync_client as client_module
from sidequest.client.plugins import Command, Query
from sidequest.client.push_plan import NO_REPLICAS, Replicas
from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.errors import RedisURLError
from sidequest.jobs.options import JobOptions, check_options, merge_options
from sidequest.store.connection import (
    CONNECT_TIMEOUT,
    SOCKET_TIMEOUT,
    _quiet_options,
    mask_url,
    sentinel_settings,
    unavailable,
)
from sidequest.store.direct import AsyncDirectPath
from sidequest.store.idle import unfit_async
from sidequest.store.redaction import redact
from sidequest.store.urls import (
    ClusterURL,
    SentinelURL,
    check_url,
    is_cluster_url,
    is_sentinel_url,
    parse_cluster_url,
    parse_sentinel_url,
)

P = ParamSpec("P")
T = TypeVar("T")
# job's aliases, spelled again: job imports this module (for `.aio`), so this one cannot import job
Delay = float | timedelta
When = float | datetime
BulkAt = When | Sequence[When] | None

__all__ = ["AsyncClient", "AsyncDirectRedis", "AsyncJobSetter", "default_client", "push", "redis", "result", "run",
           "send_event", "status"]


def connect(url: str, direct: bool = False) -> aioredis.Redis:
    """A redis.asyncio client for `url`, set up as `connection.connect` sets up the sync one
    (never re-sending a command by itself, see there). With `direct`, one whose plain commands
    take the direct path (`AsyncDirectRedis`), on one Redis (a Sentinel's or a Cluster's client
    is redis-py's own)."""
    # without the maintenance handshake (as `connection.connect`): with it on, redis-py's pool lends a
    # connection the server closed while it sat idle without looking at it first (see `CheckedPool`)
    options: dict[str, Any] = {**_quiet_options(), **({} if url.startswith("unix:") else {"socket_keepalive": True})}
    check_url(url)
    if is_sentinel_url(url):
        return _sentinel_connect(parse_sentinel_url(url))
    if is_cluster_url(url):
        return _cluster_connect(parse_cluster_url(url))
    kind = AsyncDirectRedis if direct else aioredis.Redis
    try:
        pool = CheckedPool.from_url(url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT,
                                    health_check_interval=30, retry=Retry(NoBackoff(), 0), **options)
    except ValueError as exc:
        raise RedisURLError(f"invalid Redis URL {mask_url(url)}: {redact(str(exc), url)}") from None
    client = kind(connection_pool=pool)
    client.auto_close_connection_pool = True  # as `from_url` makes it: the pool is the client's own
    return client


class CheckedPool(aioredis.ConnectionPool):
    """redis.asyncio's pool, which also sees a close its loop has not read yet (the loop ran a
    request's synchronous code meanwhile) before it lends a connection (`idle.unfit_async`):
    redis-py's own look sees only what the loop has read."""

    async def ensure_connection(self, connection: Any) -> None:
        if connection.is_connected and unfit_async(connection, True):
            await connection.disconnect()  # nothing was sent on it
        await super().ensure_connection(connection)


def _sentinel_connect(url: SentinelURL) -> aioredis.Redis:
    """A redis.asyncio client of the primary the Sentinels of `url` name (`connection` tells how)."""
    from redis.asyncio.sentinel import Sentinel

    asked, settings = sentinel_settings(url)
    sentinels = Sentinel(list(url.sentinels), sentinel_kwargs={**asked, "retry": Retry(NoBackoff(), 0)})  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis-py 8.2
    primary: aioredis.Redis = sentinels.master_for(url.service, retry=Retry(NoBackoff(), 0), **settings)
    return primary


def _cluster_connect(url: ClusterURL) -> aioredis.Redis:
    """A redis.asyncio client of the Redis Cluster `url` names, typed as the plain client whose
    command methods it shares (`connection` tells why and how it is set up). It reads the slot
    map on its first command."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    cluster = RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in url.nodes],
                           username=url.username, password=url.password, ssl=url.tls,
                           socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT,
                           socket_keepalive=True, health_check_interval=30, retry=Retry(NoBackoff(), 0))
    return cast(aioredis.Redis, cluster)


class AsyncDirectRedis(aioredis.Redis):
    """redis.asyncio's client with its plain commands sent through a `wire.AsyncDirectPath`: the same
    methods and replies (redis-py's reply callbacks run), at a fraction of the CPU per command:
    plain commands share the loop's one connection (`mux.Multiplexed`), and one that blocks or
    changes its connection's state takes a connection of its own (no pool cap). Pipelines,
    pub/sub and scripts objects are redis-py's own. What `sidequest.client.async_client.redis()` gives async jobs, as
    `wire.DirectRedis` is what `sidequest.redis()` gives sync ones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kwargs_of_pool = self.connection_pool.connection_kwargs
        self._direct = (not self.single_connection_client
                        and kwargs_of_pool.get("encoding", "utf-8").lower().replace("-", "") == "utf8")
        self._lane = AsyncDirectPath(self)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        options.pop("keys", None)  # only for client-side caching, which this path does not use
        if not self._direct or NEVER_DECODE in options or EMPTY_RESPONSE in options:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        try:
            response = (await self._lane.exchange([args]))[0]
        except TypeError as exc:  # an argument hiredis cannot pack (None, a bool): redis-py's own error
            raise DataError(f"Invalid input in command {args[0]!r}: {exc}") from None
        callback = self.response_callbacks.get(args[0])
        if callback is None:
            return response
        value = callback(response, **options)
        return await value if inspect.isawaitable(value) else value

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await self._lane.close()
        await super().aclose(close_connection_pool)


class AsyncClient:
    """Pushes jobs and reads their state on `redis.asyncio`; payloads are built by a `Client`.

    ```python
    async with sidequest.client.async_client.AsyncClient(sidequest.Config(redis_url=url)) as client:
        jid = await client.push(build_report, [7])
        print(await client.result(jid))
    ```
    """

    def __init__(self, config: Config | None = None, *, redis_client: aioredis.Redis | None = None,
                 client: Client | None = None, clock: Callable[[], float] = time.time) -> None:
        self.sync = client if client is not None else Client(config, clock=clock)  # builds; never connects
        self.config = self.sync.config
        self._redis = redis_client
        self._nodes: dict[str, aioredis.Redis] = {}  # Cluster mode: a client of each primary written to
        self._lanes: dict[str, AsyncDirectPath] = {}  # pushes' connections: "" on one Redis, else per primary
        self._direct: aioredis.Redis | None = None

    async def connection(self) -> aioredis.Redis:
        """The redis.asyncio client, connected (and PINGed) on first use."""
        if self._redis is None:
            fresh = connect(self.config.url)
            try:
                await fresh.ping()
            except (RedisConnectionError, RedisTimeoutError, OSError, RedisClusterException, ResponseError) as exc:
                await fresh.aclose()  # an error reply too: NOAUTH, a plain Redis behind a Sentinel URL
                raise unavailable(exc, self.config.url) from None
            if self._redis is None:
                self._redis = fresh
            else:  # another task connected meanwhile
                await fresh.aclose()
        return self._redis

    @property
    def direct(self) -> aioredis.Redis:
        """A redis.asyncio client of this client's Redis for a job's own commands (see
        `redis()`); made on first use, connected on its first command."""
        if self._direct is None:
            self._direct = connect(self.config.url, direct=True)
        return self._direct

    async def aclose(self) -> None:
        if self._direct is not None:
            await self._direct.aclose()
            self._direct = None
        lanes, self._lanes = self._lanes, {}
        for lane in lanes.values():
            await lane.close()
        nodes, self._nodes = self._nodes, {}
        for node in nodes.values():
            await node.aclose()
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- pushing -----------------------------------------------------------------------------------
    async def push(self, job: Any, args: Iterable[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
                   at: Any = None, in_: Any = None, **options: Unpack[JobOptions]) -> str | None:
        """`Client.push`, awaited: the jid, or None (client middleware stopped it, or a unique
        job whose claim another copy holds)."""
        now = self.sync.clock()
        when = self.sync.schedule_time(at, in_, now)
        entries, jids = self.sync.build(job, [args], [when], now, dict(options), kwargs=kwargs)
        refused = await self.write(entries, now, self.sync.replicas(job, options))
        return None if jids[0] in refused else jids[0]

    async def push_bulk(self, job: Any, args_list: Iterable[Any], *, at: Any = None, spread: Any = None,
                        **options: Unpack[JobOptions]) -> list[str | None]:
        """`Client.push_bulk`, awaited."""
        now = self.sync.clock()
        all_args = list(args_list)
        times = self.sync.bulk_times(at, len(all_args), now, spread)
        entries, jids = self.sync.build(job, all_args, times, now, dict(options))
        refused = await self.write(entries, now, self.sync.replicas(job, options))
        return [None if jid in refused else jid for jid in jids] if refused else jids

    async def write(self, entries: list[tuple[dict[str, Any], float | None]], now: float,
                    replicas: Replicas = NO_REPLICAS, also: Callable[[Any], None] | None = None) -> frozenset[str]:
        """`Client.write` on redis.asyncio: the same plan (`push_plan`), sent by `_send`."""
        if type(self.sync).write is not Client.write:  # a client that writes elsewhere (testing's fakes)
            return self.sync.write(entries, now, also=also, replicas=replicas)
        if not entries and also is None:
            return frozenset()
        connection = await self.connection()  # a Redis that cannot be reached: one clear error
        batch = self.sync.prepare(entries, now)
        commands = push_plan.single(batch, self.sync.keys, replicas, also)
        if commands is not None:  # the common push: one exchange
            push_plan.judge(batch, await self._lane_of("", connection).exchange(commands), replicas)
            return frozenset()
        return await push_plan.adrive(self.sync.plan(batch, replicas, also), self._send)

    async def _send(self, exchange: push_plan.Exchange) -> list[Any]:
        """An exchange on one connection of this client's Redis (Cluster mode: of its key's primary)."""
        key, commands, refresh = exchange
        connection = await self.connection()
        if not self.sync.keys.cluster:
            return await self._lane_of("", connection).exchange(commands)
        cluster: Any = connection
        if refresh:
            await cluster.nodes_manager.initialize()
        node = cluster.get_node_from_key(key)
        try:
            return await self._lane_of(node.name, self._node(node.host, node.port)).exchange(commands)
        except (RedisConnectionError, RedisTimeoutError):  # a failover, maybe: the next push looks again
            await cluster.nodes_manager.initialize()
            raise

    def _lane_of(self, name: str, connection: aioredis.Redis) -> AsyncDirectPath:
        """The direct path to one Redis (a Cluster's primary by its name), made once."""
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = AsyncDirectPath(connection)
        return lane

    def _node(self, host: str, port: int) -> aioredis.Redis:
        """A plain client of one primary of the cluster, made once (credentials from the URL)."""
        name = f"{host}:{port}"
        if name not in self._nodes:
            url = parse_cluster_url(self.config.url)
            self._nodes[name] = aioredis.Redis(
                host=host, port=port, username=url.username, password=url.password, ssl=url.tls,
                socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT, socket_keepalive=True,
                retry=Retry(NoBackoff(), 0))
        return self._nodes[name]

    # -- reading -----------------------------------------------------------------------------------
    async def status(self, jid: str, *, queue: str | None = None) -> str:
        """`sidequest.status`, awaited."""
        return await run(plugins.status_query(jid, queue, self.sync.clock, self.sync.keys), await self.connection())

    async def result(self, jid: str, timeout: float | None = 10.0) -> Any:
        """`sidequest.result`, awaited: the loop keeps running while it waits."""
        return await run(plugins.result_query(jid, timeout, self.sync.keys), await self.connection())

    async def send_event(self, jid: str, name: str, payload: Any = None) -> bool:
        """`sidequest.send_event`, awaited: the same query (`steps.events.send_query`) on this loop."""
        query = plugins.event_query(jid, name, payload, self.sync.clock(), self.sync.keys,
                                    self.sync.config.sidekiq_version >= 8)
        return await run(query, await self.connection())


async def run(query: Query[T], connection: aioredis.Redis) -> T:
    """Run a query by jid (see `plugins`: `lookup`'s, `steps.events`') on redis.asyncio."""
    try:
        step = next(query)
        while True:
            step = query.send(await _execute(connection, step))
    except StopIteration as stop:
        return cast("T", stop.value)


async def _execute(connection: aioredis.Redis, step: list[Command]) -> list[Any]:
    if len(step) == 1:
        name, args, kwargs = step[0]
        return [await getattr(connection, name)(*args, **kwargs)]
    pipe = connection.pipeline(transaction=False)
    for name, args, kwargs in step:
        getattr(pipe, name)(*args, **kwargs)
    return await pipe.execute()


# One AsyncClient per event loop and sync client: redis.asyncio connections belong to one loop.
_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Client, AsyncClient]] = (
    weakref.WeakKeyDictionary())


def default_client(sync: Client | None = None) -> AsyncClient:
    """The running loop's client for `sync` (default: the process-wide `sidequest.default_client()`,
    so `sidequest.configure` applies to both)."""
    loop = asyncio.get_running_loop()
    chosen = sync if sync is not None else client_module.default_client()
    clients = _defaults.setdefault(loop, {})
    if chosen not in clients:
        clients[chosen] = AsyncClient(client=chosen)
    return clients[chosen]


async def close_loop_clients() -> None:
    """Close the running loop's default clients (those `redis()` and the module's functions
    made on it): a worker's event loop ends with its worker."""
    for client in _defaults.pop(asyncio.get_running_loop(), {}).values():
        await client.aclose()


class AsyncSetOptions(JobOptions, total=False):
    """What `job.aio.set(...)` takes: the job options, and a client to push through."""

    client: Client | AsyncClient


class AsyncJobSetter(Generic[P]):
    """`job.aio`: a job's enqueue methods as coroutines, typed like the job (see the module)."""

    def __init__(self, job_class: Any, options: dict[str, Any],
                 client: Client | AsyncClient | None = None) -> None:
        """`job_class` is a `Job` subclass (what `job.aio` passes)."""
        client = options.pop("client", client)
        self.job_class = job_class
        self.options = check_options(options)
        self.client = client

    def set(self, **options: Unpack[AsyncSetOptions]) -> AsyncJobSetter[P]:
        more: dict[str, Any] = dict(options)
        client = more.pop("client", self.client)
        return AsyncJobSetter(self.job_class, merge_options(self.options, check_options(more)), client)

    def _client(self) -> AsyncClient:
        if isinstance(self.client, AsyncClient):
            return self.client
        return default_client(self.client)

    async def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return await self._client().push(self.job_class, list(args), kwargs, **self.options)

    async def perform_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return await self._client().push(self.job_class, list(args), kwargs, in_=delay, **self.options)

    async def perform_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return await self._client().push(self.job_class, list(args), kwargs, at=when, **self.options)

    async def perform_bulk(self, args_list: Iterable[Sequence[Any]], *, at: BulkAt = None,
                           spread: Delay | None = None) -> list[str | None]:
        return await self._client().push_bulk(self.job_class, args_list, at=at, spread=spread, **self.options)


def redis() -> aioredis.Redis:
    """The worker's Redis for an `async def` job's own commands, on the running loop: the
    asyncio twin of `sidequest.redis()`.

        @sidequest.job
        async def count_visit(page):
            await sidequest.client.async_client.redis().incr(f"visits:{page}")

    A redis.asyncio client (the same methods and replies) whose plain commands take the direct
    path (`AsyncDirectRedis`); in a worker it is the worker's Redis (or the one
    `sidequest.configure` set), elsewhere the default client's (`REDIS_URL`)."""
    return default_client().direct


async def push(job_name: str, args: list[Any], kwargs: Mapping[str, Any] | None = None,
               **options: Unpack[JobOptions]) -> str | None:
    """`sidequest.push`, awaited: a job by name (e.g. a Ruby job) with the loop's default client."""
    return await default_client().push(job_name, args, kwargs, **options)


async def status(jid: str, *, queue: str | None = None) -> str:
    """`sidequest.status(jid)` without blocking the loop (see `lookup` for what it costs)."""
    return await default_client().status(jid, queue=queue)


async def send_event(jid: str, name: str, payload: Any = None) -> bool:
    """`sidequest.send_event(jid, name, payload)` without blocking the loop (see `steps.events`)."""
    return await default_client().send_event(jid, name, payload)


async def result(jid: str, timeout: float | None = 10.0) -> Any:
    """`sidequest.result(jid, timeout)` without blocking the loop: other tasks run while it waits."""
    return await default_client().result(jid, timeout)
