"""One connection that every task of an event loop shares for its plain commands.

A job on the asyncio runner that sends one command awaits its reply; with a connection per
command in flight (a pool), each of a hundred such jobs pays a write, a read and an event-loop
wake-up of its own, about 20 µs of CPU a command. A `Multiplexed` connection queues the commands
of every task that sends during one turn of the loop and writes them together; the replies come
back in order, a read brings many, and each is handed to the task that waits for it (about 2 µs
a command). This is how Redis's own pipelining is meant to be used: Redis answers each
connection's commands in the order they came.

What may not share a connection goes elsewhere (`shareable`): a command that blocks, one that
changes the connection's state (SELECT, CLIENT, WATCH, MULTI...), and any call with a reading
bound of its own. The connection is made by redis-py (its address, under Sentinel the primary
of the moment, TLS, AUTH, HELLO, SELECT), then its reader and writer are used directly.

- **A caller cancelled** while it waits for its reply leaves its place in line: the reply is
  read and dropped. One cancelled while the connection is being made leaves the making to the
  others.
- **A reply that does not come** within the client's socket timeout fails every call waiting on
  the connection, as a dead connection does (`redis.TimeoutError`, `redis.ConnectionError`),
  and the next call connects afresh. A call whose reply was lost may have run (see
  `connection`): nothing is sent again.
- **A connection the server closed while it sat idle** (its `timeout`, a restart, CLIENT KILL) is
  seen by the reading task as soon as the loop runs, and the next call connects afresh; one
  whose close the loop has not read yet (it ran a job's synchronous code meanwhile) is looked at
  before the first write after `idle.CHECK_IDLE` of quiet, and its calls, not sent, go on a new
  connection (see `idle`).
- **READONLY** (a primary demoted by a failover) is raised to its caller and drops the
  connection, so the next call finds the new primary (under Sentinel).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis._parsers.hiredis import NOT_ENOUGH_DATA  # private: tested with the redis-py pinned in CI
from redis.exceptions import ReadOnlyError, ResponseError

from sidequest.store.idle import CHECK_IDLE, NotSent, unfit_async

Command = tuple[Any, ...]

READ_SIZE = 1 << 16

# Commands that block, change or read the state of the connection they are sent on, or make it
# send what no one asked for: each takes a connection of its own.
UNSHARED = frozenset(name.encode() for name in (
    "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "XREAD", "XREADGROUP",
    "WAIT", "WAITAOF", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
    "MONITOR", "SELECT", "AUTH", "HELLO", "RESET", "CLIENT", "WATCH", "UNWATCH", "MULTI", "EXEC", "DISCARD",
    "QUIT", "READONLY", "READWRITE", "ASKING", "SYNC", "PSYNC", "REPLICAOF", "SLAVEOF", "SHUTDOWN", "DEBUG",
))


def shareable(commands: Sequence[Command]) -> bool:
    """Whether `commands` may go on the shared connection (see the module): by the first word of
    each command's name (redis-py names some commands in two words, "CLIENT SETNAME"). Each
    name is judged once (`_VERDICTS`): this is on every command's path."""
    for command in commands:
        name = command[0]
        verdict = _VERDICTS.get(name) if isinstance(name, (str, bytes)) else False
        if verdict is None:
            verdict = _judge(name)
            if len(_VERDICTS) < 1024:  # command names are few; anything else is judged each time
                _VERDICTS[name] = verdict
        if not verdict:
            return False
    return True


_VERDICTS: dict[Any, bool] = {}


def _judge(name: Any) -> bool:
    if isinstance(name, str):
        name = name.encode()
    return isinstance(name, bytes) and name.split(b" ", 1)[0].upper() not in UNSHARED


class Unshareable(Exception):
    """The connection cannot be shared (its parser is not redis-py's hiredis one, or it speaks
    RESP3 with a hiredis that cannot tell a push message from a reply): nothing was sent; use a
    connection of its own."""


class _Call:
    __slots__ = ("count", "future", "replies", "sent")

    def __init__(self, future: asyncio.Future[list[Any]], count: int, sent: float) -> None:
        self.future = future
        self.count = count
        self.replies: list[Any] = []
        self.sent = sent


class Multiplexed:
    """The shared connection of one event loop (see the module). Made from a redis.asyncio
    connection pool's settings; used on one loop at a time (a call from another loop drops the
    connection of the first)."""

    def __init__(self, pool: Any) -> None:  # a redis.asyncio ConnectionPool
        self.pool = pool
        self.usable = True
        timeout = pool.connection_kwargs.get("socket_timeout")
        self.timeout: float | None = float(timeout) if timeout else None
        self._conn: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._calls: deque[_Call] = deque()
        self._out: list[bytes] = []
        self._flush: asyncio.Handle | None = None
        self._watch: asyncio.TimerHandle | None = None
        self._reading: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._quiet: float | None = None  # since when no call is in flight (None: one is, or none was yet)

    async def exchange(self, commands: Sequence[Command]) -> list[Any]:
        """Send `commands` together and return their replies; an error reply is raised (and a
        lost connection's error inside an array, as redis-py raises it)."""
        loop = asyncio.get_running_loop()
        data = b"".join([hiredis.pack_command(c) for c in commands])
        while self._conn is None or self._loop is not loop:
            await self._connect(loop)
        try:
            replies = await self._queue(loop, data, len(commands))
        except NotSent:  # the connection was found closed before the write: once more, on a new one
            while self._conn is None or self._loop is not loop:
                await self._connect(loop)
            replies = await self._queue(loop, data, len(commands))
        for reply in replies:
            if isinstance(reply, (ResponseError, redis.ConnectionError)):
                raise reply
            if type(reply) is list and reply and isinstance(reply[0], redis.ConnectionError):
                raise reply[0]
        return replies

    def _queue(self, loop: asyncio.AbstractEventLoop, data: bytes, count: int) -> asyncio.Future[list[Any]]:
        """The call's future, its bytes queued for this turn's write (a plain function, not a
        coroutine: one frame less per command on the loop's hot path)."""
        call = _Call(loop.create_future(), count, loop.time())
        self._calls.append(call)
        self._out.append(data)
        if self._flush is None:
            self._flush = loop.call_soon(self._send)
        if self._watch is None and self.timeout is not None:
            self._watch = loop.call_at(call.sent + self.timeout, self._overdue)
        return call.future

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until the connection is made (by a task of its own: a caller cancelled meanwhile
        cancels only its own wait)."""
        if self._loop is not loop:  # what was made on another loop cannot serve this one
            self._fail(redis.ConnectionError("the event loop changed"))
            self._loop = loop
        if self._connecting is None:
            self._connecting = loop.create_task(self._open(loop))
            self._connecting.add_done_callback(_retrieved)
        await asyncio.shield(self._connecting)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> None:
        conn = self.pool.connection_class(**self.pool.connection_kwargs)
        try:
            await conn.connect()
            parser = conn._parser
            reader = getattr(parser, "_reader", None)
            pushed = getattr(parser, "_hiredis_PushNotificationType", None)  # hiredis 3.2+
            if not isinstance(reader, hiredis.Reader) or (pushed is None and str(getattr(conn, "protocol", 2)) == "3"):
                self.usable = False
                raise Unshareable()
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)
            raise
        finally:
            if self._connecting is asyncio.current_task():
                self._connecting = None
        self._conn, self._quiet = conn, None
        self._reading = loop.create_task(self._read(conn, reader, pushed))

    def _send(self) -> None:
        self._flush = None
        out, self._out = self._out, []
        if self._conn is None:
            self._fail(redis.ConnectionError("the connection was lost before the commands were sent"))
        elif out:
            quiet, self._quiet = self._quiet, None
            if quiet is not None and unfit_async(self._conn, time.monotonic() - quiet >= CHECK_IDLE):
                self._fail(NotSent("Connection closed by server."))  # nothing in flight, nothing sent
                return
            self._conn._writer.write(b"".join(out))  # the reader task sees a failed write as a lost connection

    async def _read(self, conn: Any, reader: Any, pushed: type | None) -> None:
        stream = conn._reader
        calls = self._calls
        try:
            while True:
                data = await stream.read(READ_SIZE)
                if not data:
                    raise redis.ConnectionError("Connection closed by server.")
                reader.feed(data)
                demoted = False
                while (reply := reader.gets()) is not NOT_ENOUGH_DATA:
                    if pushed is not None and isinstance(reply, pushed):
                        continue  # a RESP3 push message (the server's notice): no call's reply
                    demoted = demoted or isinstance(reply, ReadOnlyError)  # raised to its caller
                    if not calls:
                        raise redis.ConnectionError("a reply that no call asked for")
                    call = calls[0]
                    call.replies.append(reply)
                    if len(call.replies) == call.count:
                        calls.popleft()
                        if not call.future.done():  # else its caller was cancelled
                            call.future.set_result(call.replies)
                        if not calls:
                            self._quiet = time.monotonic()
                if demoted:  # a primary demoted by a failover (see the module)
                    raise redis.ConnectionError("the server is a replica now (READONLY)")
        except asyncio.CancelledError:
            raise
        except redis.RedisError as exc:
            self._fail(exc, conn)
        except OSError as exc:
            self._fail(redis.ConnectionError(f"Error while reading from socket: {exc.args}"), conn)
        except Exception as exc:  # a reply that cannot be decoded, say: raised to its caller, and
            if calls and not calls[0].future.done():  # the connection is given up (out of step)
                calls.popleft().future.set_exception(exc)
            self._fail(redis.ConnectionError(f"a reply before could not be read ({type(exc).__name__})"), conn)

    def _overdue(self) -> None:
        """The oldest call's reply is late by the socket timeout: the connection is given up."""
        self._watch = None
        if not self._calls or self._loop is None or self.timeout is None:
            return
        due = self._calls[0].sent + self.timeout
        if due <= self._loop.time():
            self._fail(redis.TimeoutError("Timeout reading from socket"))
        else:
            self._watch = self._loop.call_at(due, self._overdue)

    def _fail(self, exc: redis.RedisError, conn: Any = None) -> None:
        """Drop the connection (or stop making it) and fail every call waiting on it."""
        if conn is not None and conn is not self._conn:
            return  # an older connection, already dropped
        conn, self._conn, self._quiet = self._conn, None, None
        calls, self._calls = self._calls, deque()
        self._out = []
        for handle in (self._flush, self._watch):
            if handle is not None:
                handle.cancel()
        self._flush = self._watch = None
        tasks = (self._reading, self._connecting)
        self._reading = self._connecting = None
        for task in tasks:
            if task is not None and task is not asyncio.current_task():
                with contextlib.suppress(RuntimeError):  # of a closed loop
                    task.cancel()
        for call in calls:
            if not call.future.done():
                with contextlib.suppress(RuntimeError):
                    call.future.set_exception(type(exc)(*exc.args))
        if conn is not None:
            self._drop(conn)

    def _drop(self, conn: Any) -> None:
        """Close `conn` now, and let redis-py forget it (on its own loop, if that one runs)."""
        if conn._writer is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: the socket goes with it
                conn._writer.transport.abort()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is self._loop:
            closing = running.create_task(conn.disconnect(nowait=True))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self._fail(redis.ConnectionError("the connection was closed"))
        if self._closing:
            await asyncio.wait(list(self._closing))


def _retrieved(task: asyncio.Task[None]) -> None:
    """A connect whose callers all left still has its outcome read (no "never retrieved")."""
    if not task.cancelled():
        task.exception()
