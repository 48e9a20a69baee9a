"""The asyncio runner's fetch and acknowledgement, on the event loop (see `eventloop`).

`hub.Hub`'s contract, on one loop instead of threads: one coroutine (`fetching`) takes jobs
for every free place with the RESERVE script into the process's batch list
`sidequest:reserved:<identity>:batch`, carrying the successes that ended meanwhile. When no queue
has work, one BLMOVE per queue (each on a connection of its own) waits for the next job and
moves it straight into that batch list. A success joins the next call, or is sent when its
window (`hub.ACK_WINDOW`) ends with the others of that window. A call whose reply was lost
may have moved jobs into the batch list: the list is read back once no other call is in flight,
and what it holds that this process did not know of is run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from sidequest.config import Config
from sidequest.store import faults, keys
from sidequest.store.direct import AsyncLane
from sidequest.store.outage import LOST, REDIS_ERRORS, Backoff, RedisOutage
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.batch import (
    ACK_BACKOFF_MAX,
    ACK_BACKOFF_START,
    ACK_BATCH,
    ACK_WINDOW,
    AckBackoff,
    drain,
    forget_one,
    queue_of_raw,
)
from sidequest.worker.fetch.queue_order import PausedQueues, QueueOrder, blocking_timeout

log = logging.getLogger(__name__)

Ack = tuple[bytes, list[Any]]  # a success: the job's bytes and its 'finished' operations
# A blocking call's reply is awaited this long (seconds) past its own timeout before its
# connection is given up (a stalled Redis, a lost network).
BLOCKING_GRACE = 5.0


class Runs(Protocol):
    """What the hub feeds: the capsule that runs the jobs it takes."""

    def room(self) -> int:
        """Jobs that may start now (0 while a suspect waits to run alone)."""
        ...

    def running(self) -> int: ...

    def take(self, queue: str, raw: bytes) -> None:
        """Run a job just taken (or put it back, when quieting)."""
        ...


class LoopHub:
    def __init__(self, config: Config, identity: str, scripts: Scripts, runs: Runs, outage: RedisOutage,
                 quieting: threading.Event, *, paused: PausedQueues | None = None,
                 clock: Callable[[], float] = time.time, ack_window: float = ACK_WINDOW) -> None:
        self.scripts = scripts
        self.keys = scripts.keys
        self.runs = runs
        self.outage = outage
        self.quieting = quieting
        self.clock = clock
        self.queue_faults = faults.QueueFaults()
        self.ack_window = ack_window
        self.batch = keys.reserved(identity, keys.BATCH_SLOT)
        self.order = QueueOrder(config, None, paused, self.keys)
        self.timeout = blocking_timeout(config)
        self.grace = BLOCKING_GRACE
        self.waiters_max = config.async_jobs
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0
        self.lane: AsyncLane | None = None
        self._blocking: dict[int, asyncio.Task[None]] = {}
        self._block_failed: BaseException | None = None  # a BLMOVE's failure, for `fetching` to back off
        self.backoff = Backoff()  # the fetch's, as a processor's (`outage.Backoff`)
        self._turn = 0
        self._calls = 0  # flushes in flight: no read-back (adoption) meanwhile
        self._taking = 0  # the fetch's own RESERVE or read-back, while under way (see `waiting`)
        self._acks: deque[Ack] = deque()
        self._ack_pending = False
        self._sends = AckBackoff(ACK_BACKOFF_START, ACK_BACKOFF_MAX)  # the threads' rule for a failed send
        self._known: Counter[bytes] = Counter()  # jobs in the batch list this process knows of
        self._known_lock = threading.Lock()  # the thread pool settles too
        self._suspect = False  # a reply was lost: the batch list may hold a job no one knows of
        self._changed: asyncio.Event | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # -- fetching ----------------------------------------------------------------------------------
    async def fetching(self, lane: AsyncLane) -> None:
        """Take jobs until the worker quiets (then wait for the blocking calls, send the successes)."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self._changed = asyncio.Event()
        self.lane = lane
        try:
            while not self.quieting.is_set():
                try:
                    await self._fetch_once()
                except REDIS_ERRORS as exc:
                    self.outage.down(exc)
                    await self.pause(self.backoff.failed())
                except Exception as exc:  # a fault outside any job: never a tight loop
                    delay = self.backoff.failed()
                    log.exception("the asyncio runner's fetch failed (%s); again in %.1f s", exc, delay)
                    await self.pause(delay)
            if self._blocking:
                await asyncio.wait(list(self._blocking.values()))
        finally:
            await self.flush()

    def waiting(self) -> int:
        """Fetches in flight, each of which may still bring jobs: BLMOVEs, and a RESERVE or a
        read-back under way (a suspect waits for them all, as for a processor past the gate)."""
        return len(self._blocking) + self._taking

    def free(self) -> int:
        return self.runs.room() - len(self._blocking)

    async def _fetch_once(self) -> None:
        """One round: jobs taken, or nothing anywhere (then BLMOVEs wait). The back-off starts
        again only once a round took jobs or a BLMOVE answered, as a processor's does once its
        whole fetch (RESERVE, then BLMOVE) succeeds: a BLMOVE that keeps failing while RESERVE
        answers backs off too."""
        if self._block_failed is not None:
            failed, self._block_failed = self._block_failed, None
            raise failed
        if self.free() <= 0:  # a job's end pokes
            await self.wait_change(None if self.runs.running() else 0.5)
            return
        if self._suspect:
            if self._blocking or self._calls:  # their replies may still add to or take from the list
                await self.wait_change(0.05)
                return
            began = time.monotonic()
            self._taking += 1
            try:
                adopted = await self._adopt()
            finally:
                self._taking -= 1
                self.poke()
            self.outage.up(began)
            for raw in adopted:
                self.runs.take(queue_of_raw(raw), raw)
            if adopted:
                self.backoff.reset()
                return
        order = self.order()
        want = self.free() if order else 0
        acks = self._drain()
        began = time.monotonic()
        got: list[tuple[str, bytes]] = []
        if want or acks:
            self._taking += 1
            try:
                got = await self._reserve(order, want, acks)
            finally:
                self._taking -= 1
                self.poke()
        self.outage.up(began)
        for key, raw in got:
            self.runs.take(self.keys.queue_name(key), raw)
        if got:
            self.backoff.reset()
            return
        if not order:  # every queue is paused
            await self.pause(self.timeout)
            return
        await self._idle(order)

    async def _reserve(self, order: list[str], want: int, acks: list[Ack]) -> list[tuple[str, bytes]]:
        """RESERVE (see `hub.Hub`): up to `want` jobs into the batch list, `acks` out of it."""
        assert self.lane is not None
        try:
            reply = await self.lane.evalsha(self.scripts.reserve, [*order, self.batch, keys.RESERVATIONS, self.batch],
                                            reserve_args(self.clock(), want, acks))
            reply = faults.reserved(reply, acks, self.queue_faults)
        except BaseException as exc:
            self._acks.extendleft(reversed(acks))  # not applied: kept for the next call
            if isinstance(exc, LOST):
                self._suspect = True  # it may have taken jobs whose reply never came
            raise
        with self._known_lock:
            for raw, _ in acks:
                forget_one(self._known, raw)
            for i in range(1, len(reply), 2):
                self._known[reply[i]] += 1
        return [(reply[i].decode(), reply[i + 1]) for i in range(0, len(reply), 2)]

    async def _idle(self, order: list[str]) -> None:
        """Nothing anywhere: a BLMOVE per queue (those not waiting already) into the batch list."""
        spread = self.order.spread() or order
        waiters = min(len(spread), self.waiters_max)
        for i in range(waiters):
            if i not in self._blocking and self.free() > 0:
                key = spread[(i + self._turn) % len(spread)]
                self._blocking[i] = asyncio.get_running_loop().create_task(self._block(i, key))
        if len(spread) > waiters:  # fewer places than queues: every queue is watched in turn
            self._turn += 1
        await self.wait_change(self.timeout)

    async def _block(self, i: int, key: str) -> None:
        """One BLMOVE. A reply that never came (lost, late, or its wait cancelled) may be a job
        moved into the batch list: it is read back (`_adopt`) before the next fetch. A failure
        is the fetch's: `fetching` backs off before the next try."""
        assert self.lane is not None
        try:
            reply = await self.lane.exchange([("BLMOVE", key, self.batch, "RIGHT", "LEFT", self.timeout)],
                                             timeout=self.timeout + self.grace)
        except BaseException as exc:
            self._suspect = self._suspect or isinstance(exc, (*LOST, asyncio.CancelledError))
            if faults.wrong_type(exc):  # that queue's fault, not an outage: its place waits as on an empty queue
                self.queue_faults.report(key, str(exc))
                await asyncio.sleep(self.timeout)
                return
            if isinstance(exc, REDIS_ERRORS):
                self._block_failed = exc
                return
            raise
        finally:
            del self._blocking[i]
            self.poke()
        self.backoff.reset()
        raw = reply[0]
        if raw is not None:
            with self._known_lock:
                self._known[raw] += 1
            self.runs.take(self.keys.queue_name(key), raw)

    async def _adopt(self) -> list[bytes]:
        """Jobs in the batch list that this process did not know of before reading it."""
        assert self.lane is not None
        with self._known_lock:
            known = Counter(self._known)
        held = Counter((await self.lane.exchange([("LRANGE", self.batch, 0, -1)]))[0])
        self._suspect = False
        found = list((held - known).elements())
        with self._known_lock:
            for raw in found:
                self._known[raw] += 1
        return found

    def lost_reply(self) -> None:
        self._suspect = True

    # -- acknowledging -----------------------------------------------------------------------------
    def acknowledge(self, raw: bytes, ops: list[Any]) -> None:
        """A success: sent within the window (from the loop, or from a thread of the pool)."""
        self._acks.append((raw, ops))
        if threading.get_ident() == self.loop_thread:
            self._window()
        elif self.loop is not None:
            self.loop.call_soon_threadsafe(self._window)

    def _window(self) -> None:
        """(On the loop.) The first success since the last call opens a window; a full batch is
        sent at once."""
        assert self.loop is not None
        if len(self._acks) >= ACK_BATCH:
            self._ack_pending = False
            self.background(self.flush())
        elif not self._ack_pending and self._acks:
            self._ack_pending = True
            self.loop.call_later(self.ack_window, self._window_ended)

    def _window_ended(self) -> None:
        if self._ack_pending and self._acks:
            self._flush_soon()
        self._ack_pending = False

    def _flush_soon(self) -> None:
        self.background(self.flush())

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        """(On the loop.) Run `work` as a task kept referenced until it ends (the loop keeps only a
        weak reference to a task: an unreferenced one may be collected before it ends)."""
        assert self.loop is not None
        task = self.loop.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def flush(self) -> None:
        """Send the successes now; a failure keeps them, sent again after a back-off."""
        acks = self._drain()
        if not acks:
            return
        self._calls += 1
        try:
            await self._reserve([], 0, acks)
        except Exception as exc:  # the task's boundary: a Redis error, or a fault outside any job
            delay = self._sends.failed(exc, len(acks))
            if self.loop is not None:
                self.loop.call_later(delay, self._flush_soon)
            return
        finally:
            self._calls -= 1
            self.poke()
        self._sends.succeeded()

    async def settle_background(self) -> None:
        """Until the window's flushes under way have ended (at the end, before the lane closes:
        one cut off would log a failed acknowledgement that `flush_sync` then sends anyway)."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=BLOCKING_GRACE)  # each call is bounded anyway

    def flush_sync(self, lane: Any) -> None:
        """Send the successes left at the end on `lane`, a sync `wire.Lane` (the stopping thread)."""
        acks = self._drain()
        if acks:
            faults.reserved(lane.evalsha(self.scripts.reserve, [self.batch, keys.RESERVATIONS, self.batch],
                                         reserve_args(self.clock(), 0, acks)), acks, self.queue_faults)

    def _drain(self) -> list[Ack]:
        self._ack_pending = False  # what this call carries closes the window
        return drain(self._acks)

    def forget(self, raw: bytes) -> None:
        """A job of the batch list left it through a call of its own (a SETTLE)."""
        with self._known_lock:
            forget_one(self._known, raw)

    # -- waiting -----------------------------------------------------------------------------------
    def poke(self) -> None:
        """Wake the fetch: a place is free, a job arrived, a call ended, or a stop began."""
        if self._changed is None or self.loop is None:
            return
        if threading.get_ident() == self.loop_thread:
            self._changed.set()
        else:
            self.loop.call_soon_threadsafe(self._changed.set)

    async def wait_change(self, timeout: float | None = None) -> None:
        """Until `poke`, or at most `timeout` seconds (None: a job's end or a stop will poke)."""
        assert self._changed is not None
        self._changed.clear()
        if timeout is None:  # the busy path: no timer to make and cancel
            await self._changed.wait()
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    async def pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.quieting.is_set() and (left := end - time.monotonic()) > 0:
            await self.wait_change(min(left, 0.5))


def reserve_args(now: float, want: int, acks: list[Ack]) -> list[Any]:
    """RESERVE's arguments: the time, how many jobs to take, and the successes with their ops."""
    args: list[Any] = [repr(now), want, len(acks)]
    for raw, ops in acks:
        args += [raw, *ops]
    return args
