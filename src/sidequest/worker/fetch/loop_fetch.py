"""The asyncio runner's fetch, on the event loop (see `worker.asyncio_runner`).

The threads' rules, driven from one loop instead of threads: the RESERVE call, its reply and
the read-back are `reserve.BatchLedger`'s, the acknowledgement window is the one
`acknowledger.Acknowledger`, timed here by loop timers (`acknowledger.AckTimers`). What is the
loop's own is how the calls are scheduled: one coroutine (`fetching`) takes jobs for every free
place into the process's batch list `sidequest:reserved:<identity>:batch`, carrying the
successes that ended meanwhile; when no queue has work, one BLMOVE per queue (each on a
connection of its own) waits for the next job and moves it straight into that batch list. After
a lost reply the list is read back once no other call is in flight (a call under way may still
add to it or take from it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from sidequest.config import Config
from sidequest.store import keys
from sidequest.store.direct import AsyncDirectPath
from sidequest.store.outage import LOST, REDIS_ERRORS, Backoff, RedisOutage
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.acknowledger import ACK_WINDOW, Ack, Acknowledger, AckTimers
from sidequest.worker.fetch.queue_order import PausedQueues, QueueOrder, blocking_timeout
from sidequest.worker.fetch.reserve import BatchLedger, Taken, queue_of_raw

log = logging.getLogger(__name__)

# A blocking call's reply is awaited this long (seconds) past its own timeout before its
# connection is given up (a stalled Redis, a lost network).
BLOCKING_GRACE = 5.0


class Runs(Protocol):
    """What the fetch feeds: the runner that runs the jobs it takes."""

    def room(self) -> int:
        """Jobs that may start now (0 while a suspect waits to run alone)."""
        ...

    def running(self) -> int: ...

    def take(self, queue: str, raw: bytes) -> None:
        """Run a job just taken (or put it back, when quieting)."""
        ...


class LoopFetch:
    """Fetch and acknowledgement of the asyncio runner's batch list, on its loop (see module)."""

    def __init__(self, config: Config, identity: str, scripts: Scripts, runs: Runs, outage: RedisOutage,
                 quieting: threading.Event, *, paused: PausedQueues | None = None,
                 clock: Callable[[], float] = time.time, ack_window: float = ACK_WINDOW) -> None:
        self.scripts = scripts
        self.keys = scripts.keys
        self.runs = runs
        self.outage = outage
        self.quieting = quieting
        self.batch = keys.reserved(identity, keys.BATCH_SLOT)
        self.order = QueueOrder(config, None, paused, self.keys)
        self.timeout = blocking_timeout(config)
        self.grace = BLOCKING_GRACE
        self.waiters_max = config.async_jobs
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0
        self.lane: AsyncDirectPath | None = None
        self.ledger = BatchLedger(clock=clock)
        self.queue_faults = self.ledger.queue_faults
        self.acks = Acknowledger(ack_window)
        self.timers = AckTimers(self.acks, lambda acks: self._reserve([], 0, acks), self.poke)
        self._blocking: dict[int, asyncio.Task[None]] = {}
        self._block_failed: BaseException | None = None  # a BLMOVE's failure, for `fetching` to back off
        self.backoff = Backoff()  # the fetch's, as a processor's (`outage.Backoff`)
        self._turn = 0
        self._taking = 0  # the fetch's own RESERVE or read-back, while under way (see `waiting`)
        self._changed: asyncio.Event | None = None

    # -- fetching ----------------------------------------------------------------------------------
    async def fetching(self, lane: AsyncDirectPath) -> None:
        """Take jobs until the worker quiets (then wait for the blocking calls, send the successes)."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self._changed = asyncio.Event()
        self.lane = lane
        self.timers.start()
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
        if self.ledger.suspect:
            if self._blocking or self.timers.calls:  # their replies may still add to or take from the list
                await self.wait_change(0.05)
                return
            if self._took(await self._taken_by(self._adopt())):
                return
        order = self.order()
        want = self.free() if order else 0
        acks = self.acks.take()
        got: list[Taken] = []
        if want or acks:
            try:
                got = await self._taken_by(self._reserve(order, want, acks))
            except BaseException:
                self.acks.returned(acks)  # not applied: kept for the next call
                raise
        else:  # every queue paused (their list read), nothing to send
            self.outage.up(time.monotonic())
        if self._took(got):
            return
        if not order:  # every queue is paused
            await self.pause(self.timeout)
            return
        await self._idle(order)

    async def _taken_by(self, call: Coroutine[Any, Any, list[Taken]]) -> list[Taken]:
        """The jobs `call` (a RESERVE or a read-back) took; while under way it is a fetch in
        flight (`waiting`). A success tells the outage it has ended."""
        began = time.monotonic()
        self._taking += 1
        try:
            got = await call
        finally:
            self._taking -= 1
            self.poke()
        self.outage.up(began)
        return got

    def _took(self, got: list[Taken]) -> bool:
        """Run the jobs taken; True if there were any."""
        for key, raw in got:
            self.runs.take(self.keys.queue_name(key), raw)
        if got:
            self.backoff.reset()
        return bool(got)

    async def _reserve(self, order: list[str], want: int, acks: list[Ack]) -> list[Taken]:
        """RESERVE (`reserve.BatchLedger`): up to `want` jobs into the batch list, `acks` out of it."""
        assert self.lane is not None
        return await self.ledger.send_async(self.lane, self.scripts.reserve,
                                            [*order, self.batch, keys.RESERVATIONS, self.batch], want, acks)

    async def _adopt(self) -> list[Taken]:
        """Jobs in the batch list that this process did not know of before reading it."""
        assert self.lane is not None
        known = self.ledger.to_read_back()
        if known is None:
            return []
        try:
            held = (await self.lane.exchange([("LRANGE", self.batch, 0, -1)]))[0]
        except BaseException:
            self.ledger.unread()
            raise
        return [(self.keys.queue(queue_of_raw(raw)), raw) for _, raw in self.ledger.adopt([(self.batch, held)], known)]

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
            if isinstance(exc, (*LOST, asyncio.CancelledError)):
                self.ledger.lost_reply()
            if self.ledger.blocking_fault(key, exc):  # its place waits as on an empty queue
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
            self.ledger.count(raw)
            self.runs.take(self.keys.queue_name(key), raw)

    def lost_reply(self) -> None:
        self.ledger.lost_reply()

    # -- acknowledging (the window is `acknowledger`'s, timed by `AckTimers`) ----------------------
    def acknowledge(self, raw: bytes, ops: list[Any]) -> None:
        """A success: sent within the window (from the loop, or from a thread of the pool)."""
        self.acks.add((raw, ops, self.batch))

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        """(On the loop.) Run `work` kept referenced until it ends."""
        self.timers.background(work)

    async def flush(self) -> None:
        """Send the successes now; a failure keeps them, sent again after a back-off."""
        await self.timers.flush()

    async def settle_background(self) -> None:
        """Until the sends under way have ended (at the end, before the lane closes)."""
        await self.timers.settle()

    def flush_sync(self, lane: Any) -> None:
        """Send the successes left at the end on `lane`, a sync `direct.DirectPath` (the stopping thread)."""
        self.acks.flush(lambda acks: self.ledger.send(lane, self.scripts.reserve,
                                                      [self.batch, keys.RESERVATIONS, self.batch], 0, acks))

    def forget(self, raw: bytes) -> None:
        """A job of the batch list left it through a call of its own (a SETTLE)."""
        self.ledger.forget(raw)

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
