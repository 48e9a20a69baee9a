"""The acknowledger: the successes of a batch list, removed within a few milliseconds, one for
both runners.

A success of the batch list is not acknowledged "with the next fetch": it is removed within
`ACK_WINDOW` (2 ms) of its end, together with the other successes that ended in that window (at
most `ACK_BATCH` wait for one call), unless a RESERVE call leaves sooner and carries them (see
`reserve`). So a busy process makes about one round trip per batch, and a process killed by
`kill -9` runs again only the jobs that were running, or that ended in the last few
milliseconds (the delivery contract, docs/reliability.md). A send that fails keeps its
successes, ahead of the later ones, for the next attempt after a back-off (`AckBackoff`); their
reserved copies keep them safe meanwhile.

`Acknowledger` makes every decision (no I/O, no thread of its own): when a window opens, when it
is due, what a send takes, what a failure keeps. A driver runs it and does the sending:

- `AckThread` (the threads runner's `batch.BatchList`): one thread that waits for the window and
  sends on the sync lane, and also runs the hub's chores (the put-back of jobs kept in hand).
- `AckTimers` (the asyncio runner's `loop_fetch.LoopFetch`): loop timers that send on the
  loop's lane.

The driver hears of a window that opens or a batch that fills through `Acknowledger.signal`,
called at most once a window on the per-job path.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import redis

from sidequest.store.outage import Backoff

log = logging.getLogger(__name__)
T = TypeVar("T")

# A success waits at most this long (seconds) for others to share its acknowledgement, and at
# most this many wait for one call. The window bounds what a `kill -9` can run again beyond the
# jobs that were running: widening it for speed breaks the delivery contract.
ACK_WINDOW = 0.002
ACK_BATCH = 64
# After its last success the acknowledger thread stays armed this long (seconds), looking once a
# window without being woken, before it sleeps until a success wakes it: a wake-up per window
# cost about 2 µs of CPU per job (measured, pinned process, bench/throughput's no-op jobs).
ACK_LINGER = 0.1
ACK_BACKOFF_START, ACK_BACKOFF_MAX = 0.05, 2.0
# A send's reply is awaited this long (seconds) at the end (`AckTimers.settle`); each is bounded anyway.
SETTLE_WAIT = 5.0

Ack = tuple[bytes, list[Any], str]  # a success: job bytes, its 'finished' ops, the batch list holding it
# What `Acknowledger.add` tells its driver: a window opened (send when it is due), or ACK_BATCH wait (send now).
OPENED, FULL = 1, 2


class Acknowledger:
    """The successes waiting to be sent and their window (see module). `add` may be called from
    any thread; deque appends and pops are atomic, so the per-job path takes no lock."""

    def __init__(self, window: float = ACK_WINDOW) -> None:
        self.window = window
        self.pending: deque[Ack] = deque()
        self.open = False  # a window is open: successes wait that no call has carried
        self.opened = 0.0  # when it opened (monotonic)
        self.full = False  # the driver was told ACK_BATCH wait; the next `take` carries them
        self.sends = AckBackoff(ACK_BACKOFF_START, ACK_BACKOFF_MAX)
        self.signal: Callable[[int], None] = _ignore  # the driver's: OPENED or FULL

    def add(self, ack: Ack) -> int:
        """A success to send within the window; the driver is signalled when the first since
        the last send opens a window, or once when ACK_BATCH wait (the send it makes then takes
        the later ones too: the asyncio runner ends a hundred jobs in one turn of its loop, and a
        signal for each past the 64th made as many sends that found nothing)."""
        pending = self.pending
        pending.append(ack)  # before looking at `open`: a `take` meanwhile either carries it or reopens
        if len(pending) >= ACK_BATCH:
            if self.full:
                return 0
            self.full = True
            self.signal(FULL)
            return FULL
        if self.open:
            return 0
        self.opened = time.monotonic()
        self.open = True
        self.signal(OPENED)
        return OPENED

    def waiting(self) -> bool:
        return self.open or bool(self.pending)

    def left(self, now: float) -> float:
        """Seconds until the open window is due (0: none is open, send what waits)."""
        return self.opened + self.window - now if self.open else 0.0

    def take(self) -> list[Ack]:
        """Every success waiting, for a call that carries them (a RESERVE, or a send): the
        window closes first, so a success added meanwhile opens the next one."""
        self.open = self.full = False
        return drain(self.pending)

    def returned(self, acks: list[Ack]) -> None:
        """Successes a call took and did not apply (it failed): first in line again."""
        self.pending.extendleft(reversed(acks))

    def flush(self, send: Callable[[list[Ack]], object]) -> None:
        """Send the successes now with `send` (a sync call); a failure keeps them, and raises."""
        acks = self.take()
        if not acks:
            return
        try:
            send(acks)
        except BaseException:
            self.returned(acks)
            raise

    def backoff(self, exc: BaseException) -> float:
        """A send (or the driver's loop) failed: seconds to wait before sending again."""
        return self.sends.failed(exc, len(self.pending))

    def succeeded(self) -> None:
        self.sends.succeeded()


class AckBackoff:
    """An acknowledger's failed sends: the successes stay reserved and are sent again after a
    back-off that doubles from `start` to `most`. One log line per run of failures: a warning
    for a Redis error (an outage), an error with its traceback for anything else (a fault
    outside any job), and one line once sending works again."""

    def __init__(self, start: float, most: float) -> None:
        self.wait = Backoff(start, most)  # the doubling rule a failing fetch follows too
        self.failing = False

    def failed(self, exc: BaseException, waiting: int) -> float:
        """Log `exc` if it begins a run of failures; the seconds to wait before sending again."""
        if not self.failing:
            if isinstance(exc, (redis.RedisError, OSError)):
                log.warning("acknowledging finished jobs failed (%s: %s); they stay reserved and are sent "
                            "again with back-off", type(exc).__name__, exc)
            else:
                log.error("the acknowledger failed (%s: %s) with %d finished job(s) waiting; they stay "
                          "reserved and are sent again with back-off", type(exc).__name__, exc, waiting,
                          exc_info=exc)
        self.failing = True
        return self.wait.failed()

    def succeeded(self) -> None:
        if self.failing:
            log.warning("finished jobs are acknowledged again")
        self.wait.reset()
        self.failing = False


class AckThread:
    """The threads runner's driver: a thread that sends the successes no RESERVE carried within
    their window, and runs `tend` (the hub's put-back of stale jobs in hand) every turn, whether
    successes wait or not; `end` runs as it stops (the hub hands back its jobs in hand).

    While successes keep coming it looks once a window by itself; only after ACK_LINGER without
    any does it sleep until a success wakes it (`idle`), so a busy process costs no wake-up per
    success or per window. It looks at least every `look_every` seconds while `holding()` (jobs
    in hand). Anything that escapes a turn is caught here, at the thread's boundary, and waits
    the acknowledger's back-off, so acknowledging never ends."""

    def __init__(self, acks: Acknowledger, send: Callable[[list[Ack]], object], *, tend: Callable[[], None],
                 end: Callable[[], None], holding: Callable[[], bool], look_every: float) -> None:
        self.acks = acks
        self.send = send
        self.tend = tend
        self.end = end
        self.holding = holding
        self.look_every = look_every
        # released to wake the idle thread (a bare lock: releasing it is one C call, where
        # Event.set takes a condition's lock and notifies, on the path of every window's first job)
        self._wake = threading.Lock()
        self._wake.acquire()
        self._full = threading.Event()  # set once ACK_BATCH successes wait
        self.idle = True  # it sleeps on `_wake` (nothing waits)
        self._quiet_since: float | None = None  # when it last found nothing waiting
        self._closed = threading.Event()
        acks.signal = self._signalled
        self._thread = threading.Thread(target=self._run, name="sidequest-acknowledger", daemon=True)
        self._thread.start()

    def _signalled(self, kind: int) -> None:
        if kind == FULL:
            self._full.set()
        if self.idle:
            self.wake()

    def wake(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:  # released already: it is waking
            pass

    def nudge(self) -> None:
        """Jobs were put in hand: an idle thread sleeps up to a second, it must look sooner."""
        if self.idle:
            self.wake()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        acks = self.acks
        try:
            while not self._closed.is_set():
                try:
                    self.tend()
                    if acks.waiting():
                        self._send_due()
                    else:
                        self._rest()
                except Exception as exc:  # thread boundary: a Redis error, or a fault outside any job
                    self._closed.wait(acks.backoff(exc))
        finally:
            self.end()

    def _send_due(self) -> None:
        """Send the successes if their window has passed (or ACK_BATCH wait), else wait for that,
        at most `look_every`, so jobs in hand are looked at meanwhile."""
        self._quiet_since = None
        left = self.acks.left(time.monotonic())
        if left > 0 and not self._full.is_set():
            self._full.wait(min(left, self.look_every))
            return  # look again: a call may have carried them, or a new window opened
        self._full.clear()
        self.acks.flush(self.send)
        self.acks.succeeded()

    def _rest(self) -> None:
        """Nothing waits: look again within a window while successes came lately (armed: a
        success then costs no wake-up), else sleep until one wakes it (`idle`)."""
        now = time.monotonic()
        if self._quiet_since is None:
            self._quiet_since = now
        if now - self._quiet_since < ACK_LINGER:
            self._wake.acquire(timeout=min(self.acks.window, self.look_every))
            return
        self._full.clear()
        self.idle = True
        if not self.acks.waiting():  # again: a success may have come meanwhile
            # bounded: a close is noticed within a second, a job kept in hand too long sooner
            woken = self._wake.acquire(timeout=self.look_every if self.holding() else 1.0)
            if not woken and not self.acks.waiting():
                # a timeout, not a success: it stays idle. Lingering here would poll every window
                # for ACK_LINGER after each such look, ~50 wake-ups a second taking the GIL in an
                # idle process, some just as a job arrives (bench/tail.py)
                return
        self.idle = False
        self._quiet_since = None

    def close(self) -> None:
        """Stop the thread (it runs `end` as it stops); at most 5 s."""
        self._closed.set()
        self._full.set()  # it may wait for a window to pass
        self.wake()
        if self._thread is not threading.current_thread():
            self._thread.join(5)


class AckTimers:
    """The asyncio runner's driver: loop timers send the successes no RESERVE carried within
    their window, with `send` awaited on the loop; a failure is sent again after the back-off.
    `add` may be called on the loop or on a thread of the runner's pool (the timers are set on
    the loop). `poke` wakes the fetch when a send ends (see `loop_fetch`)."""

    def __init__(self, acks: Acknowledger, send: Callable[[list[Ack]], Awaitable[object]],
                 poke: Callable[[], None]) -> None:
        self.acks = acks
        self.send = send
        self.poke = poke
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0
        self.calls = 0  # sends in flight
        self._background: set[asyncio.Future[Any]] = set()
        acks.signal = self._signalled

    def start(self) -> None:
        """(On the loop.) From now on, windows are timed on this loop."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()

    def _signalled(self, kind: int) -> None:
        if threading.get_ident() == self.loop_thread:
            self._arm(kind)
        elif self.loop is not None:
            self.loop.call_soon_threadsafe(self._arm, kind)

    def _arm(self, kind: int) -> None:
        assert self.loop is not None
        if kind == FULL:
            self.background(self.flush())
        else:
            self.loop.call_later(self.acks.window, self._window_ended)

    def _window_ended(self) -> None:
        if not self.acks.open:  # a call carried them
            return
        left = self.acks.left(time.monotonic())
        if left > 0:  # the timer fired early, or a newer window opened: wait for the rest
            assert self.loop is not None
            self.loop.call_later(left, self._window_ended)
        else:
            self.background(self.flush())

    def _flush_soon(self) -> None:
        self.background(self.flush())

    def background(self, work: Coroutine[Any, Any, T]) -> None:
        """(On the loop.) Run `work` kept referenced until it ends (the loop keeps only a weak
        reference to what it runs: an unreferenced one may be collected before it ends)."""
        assert self.loop is not None
        future = self.loop.create_task(work)
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def flush(self) -> None:
        """Send the successes now; a failure keeps them, sent again after a back-off."""
        acks = self.acks.take()
        if not acks:
            return
        self.calls += 1
        try:
            await self.send(acks)
        except BaseException as exc:  # the send's boundary: a Redis error, or a fault outside any job
            self.acks.returned(acks)  # kept, even when cancelled
            if not isinstance(exc, Exception):
                raise
            delay = self.acks.backoff(exc)
            if self.loop is not None:
                self.loop.call_later(delay, self._flush_soon)
            return
        finally:
            self.calls -= 1
            self.poke()
        self.acks.succeeded()

    async def settle(self) -> None:
        """Until the sends under way have ended (at the end, before the lane closes: one cut off
        would log a failed acknowledgement that a last sync send then makes anyway)."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=SETTLE_WAIT)


def _ignore(kind: int) -> None:
    """No driver yet: successes wait for a call that carries them."""


def drain(items: deque[T]) -> list[T]:
    """Everything in `items`, taken out; another thread may drain too (a flush), and each item
    goes to one of them (deque pops are atomic)."""
    taken: list[T] = []
    try:
        while True:
            taken.append(items.popleft())
    except IndexError:
        return taken
