"""Commands sent on a connection directly, for the paths every job takes (push, fetch).

redis-py's per-command layers (its retry wrapper, observability hooks that look for a metrics
collector on every call, event dispatch, the pool's health checks, response callbacks) cost
more CPU than the round trip itself since redis-py 7: an INCR costs about twice what it cost in
redis-py 6. A `DirectPath` keeps a few connections of a client aside (made from the client's own
connection settings), packs commands with hiredis, sends them in one write and reads the raw
replies (integers, bytes, lists). Errors are raised as redis-py raises them; a connection that
failed mid-call is closed and dropped, so no reply is ever left unread on one in use, and the
next call connects afresh (to the primary of the moment, under Sentinel).

A connection the server closed while it sat idle (its `timeout`, a restart, CLIENT KILL) is
replaced before use, as redis-py's pool replaces it, and a call whose failure proves Redis never
read it is sent once more on a new connection; anything else that fails without a reply may
have run and is raised (see `idle` and `connection`).
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

import hiredis
import redis
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser  # private: tested with the redis-py pinned in CI
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.commands.core import CoreCommands
from redis.connection import AbstractConnection
from redis.exceptions import AskError, NoScriptError, ResponseError

from sidequest.store.idle import CHECK_IDLE, NotSent, never_read, unfit, unfit_async
from sidequest.store.keys import space
from sidequest.store.shared_connection import Multiplexed, Unshareable, shareable

Command = tuple[Any, ...]


class DirectPath:
    """Connections for direct calls, taken and given back without the pool's checks and hooks.
    One per client that needs it; safe to share between threads; reset after a fork."""

    def __init__(self, client: redis.Redis) -> None:
        self.pool = client.connection_pool
        self._idle: list[tuple[AbstractConnection, float]] = []  # and when it was last used
        self._pid = os.getpid()

    def _take(self) -> AbstractConnection:
        # forked: never write on the parent's sockets (a pid, not an at-fork hook: uWSGI's
        # preforking and C extensions' fork() run no Python at-fork hooks)
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        while True:
            try:
                conn, used = self._idle.pop()
            except IndexError:
                return self._connect()
            if time.monotonic() - used < CHECK_IDLE or not unfit(conn._sock):
                return conn
            conn.disconnect()  # type: ignore[no-untyped-call]  # closed by the server while idle: nothing was sent

    def _connect(self) -> AbstractConnection:
        conn: AbstractConnection = self.pool.connection_class(**self.pool.connection_kwargs)
        # connect() picks the address: a Sentinel-managed connection asks the Sentinels for the
        # primary here (sending on an unconnected one would open a socket to its default host)
        conn.connect()  # type: ignore[no-untyped-call]
        if type(conn._parser) is _HiredisParser:
            kernel_timeouts(conn._sock)
        return conn

    def exchange(self, commands: Sequence[Command]) -> list[Any]:
        """Send `commands` in one write and read one reply each; an error reply is raised. Sent
        once more, on a new connection, when the first try proves Redis never read them."""
        data = b"".join([hiredis.pack_command(c) for c in commands])
        try:
            return self._exchange(self._take(), data, len(commands))
        except NotSent:
            return self._exchange(self._connect(), data, len(commands))

    def _exchange(self, conn: AbstractConnection, data: bytes, count: int) -> list[Any]:
        try:
            parser = conn._parser
            sock = conn._sock
            if type(parser) is _HiredisParser and parser._reader is not None and sock is not None:
                replies = exchange_raw(sock, parser, data, count)
            else:  # another parser: redis-py's own reading
                conn.send_packed_command([data], check_health=False)  # type: ignore[no-untyped-call]
                replies = [conn.read_response() for _ in range(count)]
        except BaseException:
            # a reply may still be unread: dropped, and a new connection is made (and connected
            # to the primary of the moment) for the next call
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        self._idle.append((conn, time.monotonic()))
        return replies

    def call(self, *command: Any) -> Any:
        return self.exchange([command])[0]

    def evalsha(self, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run a registered redis-py Script (its sha and source), loading it if the server lost it."""
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return self.call(*command)
        except NoScriptError:
            self.call("SCRIPT", "LOAD", script.script)
            return self.call(*command)

    def evalsha_many(self, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """`evalsha` for each (keys, args) of `calls`, in one round trip. The first error reply
        is raised (those before it ran); a lost script is loaded and all are sent again, so the
        script must be one that a second run of a call that ran leaves unchanged (SETTLE's
        check)."""
        commands = [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls]
        try:
            return self.exchange(commands)
        except NoScriptError:
            self.call("SCRIPT", "LOAD", script.script)
            return self.exchange(commands)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.disconnect()  # type: ignore[no-untyped-call]


def kernel_timeouts(sock: socket.socket | None) -> None:
    """Move a plain socket's timeout into the kernel (SO_RCVTIMEO, SO_SNDTIMEO) and make it
    blocking. Python waits out a timeout with a poll() before each send and each receive, each
    with its own release and retaking of the GIL; a blocking socket makes one system call, and
    the kernel's timeout ends it with EAGAIN (`exchange_raw` raises redis-py's TimeoutError).
    The kernel's timeout bounds each send and read (a partial send starts it again), where
    Python's bounds a whole `sendall`. TLS sockets keep Python's timeout."""
    if type(sock) is not socket.socket:
        return
    timeout = sock.gettimeout()
    if not timeout:
        return
    seconds = int(timeout)
    micros = max(int((timeout - seconds) * 1_000_000), 0 if seconds else 1)  # a zero timeval waits forever
    value = struct.pack("ll", seconds, micros)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    except OSError:  # a timeval that is not two longs (32-bit, 64-bit time_t): Python's timeout stays
        return
    sock.settimeout(None)


def exchange_raw(sock: socket.socket, parser: _HiredisParser, data: bytes, count: int) -> list[Any]:
    """Write `data` on a connected socket and read `count` replies through its hiredis parser's
    reader: what redis-py's send and read do for these replies, without their layers (a RESP3
    push message between them goes to the parser's handler). Errors are raised as redis-py
    raises them; `NotSent` when the failure proves Redis never read `data` (see the module)."""
    reader, buffer = parser._reader, parser._buffer
    pushed = getattr(parser, "_hiredis_PushNotificationType", None)  # redis-py 6+, hiredis 3.2+
    try:
        sent = sock.send(data)  # the first write refused: nothing of it left this host
    except (TimeoutError, BlockingIOError):  # Python's timeout, or the kernel's
        raise redis.TimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        raise NotSent(f"Error while writing to socket: {exc.args}") from None
    if sent < len(data):
        try:
            sock.sendall(memoryview(data)[sent:])
        except (TimeoutError, BlockingIOError):
            raise redis.TimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            raise redis.ConnectionError(f"Error while writing to socket: {exc.args}") from None
    answered = False  # a byte of the reply came: the call reached Redis
    replies: list[Any] = []
    while len(replies) < count:
        reply = reader.gets()
        if reply is NOT_ENOUGH_DATA:
            try:
                got = sock.recv_into(buffer)
            except (TimeoutError, BlockingIOError):
                raise redis.TimeoutError("Timeout reading from socket") from None
            except OSError as exc:  # a reset may be evidence (`idle.never_read`); a timeout (ETIMEDOUT) is not
                reset = exc.errno in (errno.ECONNRESET, errno.EPIPE) and not answered
                raise lost(sock, len(data), f"Error while reading from socket: {exc.args}", reset, False) from None
            if not got:
                raise lost(sock, len(data), "Connection closed by server.", not answered, True)
            answered = True
            reader.feed(buffer, 0, got)  # type: ignore[arg-type]  # hiredis reads any buffer
        elif pushed is not None and isinstance(reply, pushed):
            parser.handle_push_response(reply)  # type: ignore[no-untyped-call]
        elif isinstance(reply, (ResponseError, redis.ConnectionError)):
            raise reply
        elif type(reply) is list and reply and isinstance(reply[0], redis.ConnectionError):
            raise reply[0]
        else:
            replies.append(reply)
    return replies


def lost(sock: socket.socket, sent: int, message: str, unanswered: bool, fin: bool) -> redis.ConnectionError:
    """The error of a connection the server closed before the reply: `NotSent` when the close
    proves Redis never read the call (`idle.never_read`; only for a call with no byte of its
    reply read)."""
    return (NotSent if unanswered and never_read(sock, sent, fin) else redis.ConnectionError)(message)


class AsyncDirectPath:
    """`DirectPath` on redis.asyncio: connections of an asyncio client kept aside, commands packed by
    hiredis and sent in one write, raw replies read back (see the module). Used by the asyncio
    runner (`worker.asyncio_runner`) and `sidequest.aio.redis()` on one event loop. Plain commands share one
    connection (`shared_connection.Multiplexed`: the commands of every task sent during a turn of the loop go
    in one write); a blocking command, or one that changes its connection's state, takes a
    connection of its own for as long as it runs, so several can wait at once beside the others."""

    def __init__(self, client: Any) -> None:  # a redis.asyncio.Redis
        self.pool = client.connection_pool
        self._idle: list[tuple[Any, float]] = []  # and when it was last used
        self.shared = Multiplexed(self.pool)

    async def exchange(self, commands: Sequence[Command], timeout: float | None = None) -> list[Any]:
        """Send `commands` in one write and read one reply each (`timeout`: the reading's bound,
        for a blocking command; else the client's socket timeout). Commands that may share a
        connection go on the loop's shared one (`shared_connection`). A reply later than `timeout` raises
        `redis.TimeoutError` and its connection is dropped, so it is never read for the next
        call (the command may have run: a BLMOVE may have moved its job)."""
        if timeout is None and self.shared.usable and shareable(commands):
            try:
                return await self.shared.exchange(commands)
            except Unshareable:
                pass
        conn = await self._take()
        try:
            await conn.send_packed_command(b"".join([hiredis.pack_command(c) for c in commands]), check_health=False)
            if timeout is None:
                replies = [await conn.read_response() for _ in commands]
            else:  # bounded here: redis-py's own bound returns None for a late reply, left unread
                async with asyncio.timeout(timeout):
                    replies = [await conn.read_response(timeout=math.inf) for _ in commands]
        except BaseException as exc:  # a cancellation too: a reply may be unread, so the connection goes
            await conn.disconnect(nowait=True)
            if isinstance(exc, TimeoutError):
                raise redis.TimeoutError("Timeout reading from socket") from None
            raise
        self._idle.append((conn, time.monotonic()))
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    async def _take(self) -> Any:
        """An idle connection the server has not closed meanwhile (see `idle`), else a new one.
        Always looked at, however recently used: these carry pushes (`push_plan`) and blocking
        calls, which are never sent again, and the loop may have run synchronous code since
        (a request handler's) without reading a close; one poll costs less than a failed push."""
        while self._idle:
            conn, _ = self._idle.pop()
            if not unfit_async(conn, True):
                return conn
            await conn.disconnect(nowait=True)  # nothing was sent on it
        conn = self.pool.connection_class(**self.pool.connection_kwargs)
        await conn.connect()
        return conn

    async def evalsha(self, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """`DirectPath.evalsha` on this loop."""
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return (await self.exchange([command]))[0]
        except NoScriptError:
            await self.exchange([("SCRIPT", "LOAD", script.script)])
            return (await self.exchange([command]))[0]

    async def close(self) -> None:
        await self.shared.close()
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            await conn.disconnect(nowait=True)


class ClusterDirectPath(DirectPath):
    """A `DirectPath` on a Redis Cluster: each script call goes straight to the primary of its keys'
    slot (every script declares its keys, all in one slot, see `keys.ClusterKeyspace`), on a
    `DirectPath` of that node (`for_key`, which a push's exchanges use too, see `push_plan`), found
    from the cluster client's slot map. A MOVED or ASK answer (the slot moved: a failover, a
    resharding) means nothing ran: the slot map is read again and the call is sent once more (a
    script through redis-py's cluster client, which follows the redirection). A connection error
    refreshes the map too, and is raised (the call may have run)."""

    def __init__(self, client: Any) -> None:  # a redis.cluster.RedisCluster
        self.client = client
        self._nodes: dict[str, DirectPath] = {}

    def for_key(self, key: Any) -> DirectPath:
        """The `DirectPath` of the primary that serves `key`'s slot, made once per node."""
        node = self.client.get_node_from_key(key)
        lane = self._nodes.get(node.name)
        if lane is None:
            lane = self._nodes[node.name] = DirectPath(self.client.get_redis_connection(node))
        return lane

    def exchange(self, commands: Sequence[Command]) -> list[Any]:
        return [self.client.execute_command(*command) for command in commands]

    def evalsha(self, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        try:
            return self.for_key(keys[0]).evalsha(script, keys, args)
        except AskError:  # MOVED too: refused before it ran
            self.client.nodes_manager.initialize()
            return script(keys=list(keys), args=list(args), client=self.client)
        except (redis.ConnectionError, redis.TimeoutError):
            self.client.nodes_manager.initialize()
            raise

    def evalsha_many(self, script: Any, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """One call after another: each goes to the primary of its own keys."""
        return [self.evalsha(script, keys, args) for keys, args in calls]

    def close(self) -> None:
        nodes, self._nodes = self._nodes, {}
        for lane in nodes.values():
            lane.close()


def direct_path_for(client: Any) -> DirectPath:
    """The direct path for `client`: a `DirectPath` of its own connections, or on a Redis Cluster a
    `ClusterDirectPath` through the cluster client."""
    return ClusterDirectPath(client) if space(client).cluster else DirectPath(client)


class DirectRedis(redis.Redis):
    """redis-py's client, with its plain commands sent through a `DirectPath`: the same methods and
    replies (redis-py's own reply callbacks run), at about half the CPU per command. Pipelines,
    pub/sub, scripts objects and client-side caching are redis-py's own. What `sidequest.redis()`
    gives jobs, as `Sidekiq.redis` gives Ruby jobs the worker's pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kwargs_of_pool = self.connection_pool.connection_kwargs
        self._direct = (self.connection is None and getattr(self.connection_pool, "cache", None) is None
                        and kwargs_of_pool.get("encoding", "utf-8").lower().replace("-", "") == "utf8")
        self._lane = DirectPath(self)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        options.pop("keys", None)  # only for client-side caching, which this path does not use
        if not self._direct or NEVER_DECODE in options or EMPTY_RESPONSE in options:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        name = args[0]  # "CLIENT SETNAME" is sent as two words, as redis-py sends it
        spaced = (type(name) is str and " " in name) or (type(name) is bytes and b" " in name)
        sent = (*name.split(), *args[1:]) if spaced else args
        try:
            response = self._lane.call(*sent)
        except TypeError as exc:  # an argument hiredis cannot pack (None, a bool): redis-py's own error
            raise redis.DataError(f"Invalid input in command {args[0]!r}: {exc}") from None
        callback = self.response_callbacks.get(name)  # type: ignore[no-untyped-call]
        return callback(response, **options) if callback is not None else response

    def close(self) -> None:
        self._lane.close()
        super().close()


class _Spelled(CoreCommands):
    """redis-py's command methods, each returning the command it would send."""

    _event_dispatcher: Any = None  # declared by redis-py's typing of the mixin; never used here

    def execute_command(self, *args: Any, **options: Any) -> Command:
        return args


_SPELLED = _Spelled()


class Recorder:
    """A pipeline that records the commands queued on it, for a push's MULTI (`push_plan`): the
    methods a push uses written out (they are on every push's path), and any other redis-py
    command method (a task's or workflow's records) spelled by redis-py itself."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        spell = getattr(_SPELLED, name)

        def record(*args: Any, **kwargs: Any) -> None:
            self.commands.append(spell(*args, **kwargs))
        return record

    def sadd(self, key: str, *members: Any) -> None:
        self.commands.append(("SADD", key, *members))

    def lpush(self, key: str, *values: Any) -> None:
        self.commands.append(("LPUSH", key, *values))

    def zadd(self, key: str, mapping: dict[Any, float]) -> None:
        self.commands.append(("ZADD", key, *[x for member, score in mapping.items() for x in (repr(score), member)]))

    def hset(self, key: str, mapping: dict[str, Any]) -> None:
        self.commands.append(("HSET", key, *[x for item in mapping.items() for x in item]))

    def pexpire(self, key: str, ms: int) -> None:
        self.commands.append(("PEXPIRE", key, ms))
