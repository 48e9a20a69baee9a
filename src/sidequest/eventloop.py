"""The asyncio runner: `async def` jobs fetched, run and acknowledged on one event loop.

With `runner: asyncio` (or `auto`, the default, when every job the worker runs is `async def`),
the process's own capsule has no processor threads: `async_jobs` jobs (100 by default) run at
once as tasks of the process's event loop, and the Redis traffic of fetching and acknowledging
is sent on that loop too, through `wire.AsyncLane` (redis.asyncio connections, hiredis).

- **Fetch.** One coroutine takes jobs for every free place: the RESERVE script of the threads'
  `fetch.Hub`, into the same batch list `sidequest:reserved:<identity>:batch`, carrying the
  successes that ended meanwhile. When no queue has work, one BLMOVE per queue (each on a
  connection of its own) waits for the next job and moves it straight into that batch list, so
  a job pushed to an idle worker starts about one round trip later.
- **Acknowledge.** A success joins the next call, or is sent when its window (`fetch.ACK_WINDOW`)
  ends, with the others of that window: the delivery contract of the threads
  (docs/reliability.md). A call whose reply was lost leaves the batch list to be read back and
  what it holds that no one knows of is run (as `fetch.Hub` adopts).
- **Run.** The common path (a job that decodes, is registered, is `async def`, with no server
  middleware and no feature operation at `taken`) runs on the loop. Everything else goes through
  the very code a processor thread runs (`processor.Processor`), on a thread pool of
  `concurrency` threads: a sync job, a payload that does not decode, a job past its deadline, an
  unknown name, server middleware (its links are sync), every outcome but success (retry, dead,
  snooze: their SETTLE call and the retrier's hooks). So the two runners cannot disagree on a
  job's fate.
- **Time limits** cancel the job's task for real (`JobTimeoutError`, the retry path).
- **Suspects** (a job in flight at two crashes, see `gate`) run alone: fetching pauses until the
  other jobs of the loop have ended.
- **Stop.** Quiet ends fetching; running jobs get until the deadline; then each job still
  running is put back at the head of its queue and its task is cancelled.

Redis Cluster mode runs the threads (the batch list is one per queue there; see `fetch`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from . import keys
from .config import Config
from .errors import JobTimeoutError, PayloadError, UnknownJobError
from .fetch import ACK_BATCH, ACK_WINDOW, PausedQueues, QueueOrder, blocking_timeout, queue_of_raw
from .gate import SUSPECT_AFTER
from .lifecycle import has_ops
from .manager import put_back
from .outcome import Outcome, error_class_name, invalid
from .payload import decode, trace_id
from .processor import BACKOFF_MAX, BACKOFF_START, REDIS_ERRORS, Processor, Runtime, job_context, quieting_context
from .scripts import Scripts
from .wire import AsyncLane
from .work import Settler, UnitOfWork

log = logging.getLogger(__name__)

T = TypeVar("T")
Ack = tuple[bytes, list[Any]]  # a success: the job's bytes and its 'finished' operations
LOST = (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError)  # a reply may be lost


def runs_on_the_loop(job_classes: list[type[Any]]) -> bool:
    """`runner: auto`'s rule: every job the worker runs is `async def` (and there is one)."""
    return bool(job_classes) and all(inspect.iscoroutinefunction(getattr(c, "perform", None)) for c in job_classes)


class LoopCapsule:
    """The process's own capsule on the event loop: what `Launcher` asks of a capsule's hub
    (`queues`, `batch_of`, `close`) and of its manager (`start`, `busy`, `alive`, `slots`,
    `quiet`, `hurry`, `stop`), and the `Fetch` its units of work end through."""

    answered = True

    def __init__(self, runtime: Runtime, config: Config, identity: str, scripts: Scripts,
                 loop: Callable[[], asyncio.AbstractEventLoop], *, client: redis.Redis,
                 connect: Callable[[], Any],
                 paused: PausedQueues | None = None, clock: Callable[[], float] = time.time,
                 ack_window: float = ACK_WINDOW) -> None:
        if scripts.keys.cluster:
            raise ValueError("the asyncio runner needs one Redis (Cluster mode runs the threads)")
        self.rt = runtime
        self.config = config
        self.identity = identity
        self.scripts = scripts
        self.keys = scripts.keys
        self.clock = clock
        self.ack_window = ack_window
        self.limit = config.async_jobs
        self.batch = keys.reserved(identity, keys.BATCH_SLOT)  # the batch list: every job here
        self.reserved: str | None = self.batch  # (`Fetch`: where its units are held)
        self.order = QueueOrder(config, None, paused, self.keys)
        self.timeout = blocking_timeout(config)
        self._loop_of = loop
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self.redis = client
        self._connect = connect  # a redis.asyncio client of the worker's Redis, made on the loop
        self.settler = Settler(config, client, scripts, clock)  # a pool thread's SETTLE calls
        self.pool = concurrent.futures.ThreadPoolExecutor(config.concurrency, thread_name_prefix="sidequest-sync")
        self.side = Processor(runtime, self, self, 0)  # the threads' code, for all but the common path
        self.quieting = threading.Event()
        self.hard_stop = threading.Event()
        self._hurry = threading.Event()
        self._ended = threading.Condition()  # the stopping thread waits on it for the last job
        self._running: dict[asyncio.Task[None], UnitOfWork] = {}
        self._tids: list[int] = []
        self._next_tid = 0
        self._blocking: dict[int, asyncio.Task[None]] = {}
        self._calls = 0  # flushes in flight: no read-back (adoption) meanwhile
        self._acks: deque[Ack] = deque()
        self._ack_pending = False
        self._ack_delay = BACKOFF_START
        self._known: Counter[bytes] = Counter()  # jobs in the batch list this process knows of
        self._known_lock = threading.Lock()  # pool threads settle too
        self._suspect = False  # a reply was lost: the batch list may hold a job no one knows of
        self._alone = False  # a suspect waits to run alone: take no job meanwhile
        self._turn = 0
        self._changed: asyncio.Event | None = None
        self._main: concurrent.futures.Future[None] | None = None
        self._async_kind: dict[type, bool] = {}
        self._lane: AsyncLane | None = None

    # -- the launcher's side ---------------------------------------------------------------------
    def start(self) -> None:
        self.loop = self._loop_of()
        self._main = asyncio.run_coroutine_threadsafe(self._fetching(), self.loop)

    @property
    def busy(self) -> int:
        return len(self._running)

    def alive(self) -> int:
        return 0 if self._main is None or self._main.done() else 1

    def slots(self) -> tuple[list[int], set[int]]:
        """No processor threads, so no reserved list of their own (see `Launcher`)."""
        return [], set()

    def queues(self) -> list[str]:
        return [self.keys.queue_name(key) for key in self.order.keys]

    def batch_of(self, queue: str) -> str:
        return self.batch

    def quiet(self) -> None:
        if not self.quieting.is_set():
            log.info("quieting: no new jobs will be fetched")
            self.quieting.set()
            self._poke()

    def hurry(self) -> None:
        self._hurry.set()
        with self._ended:
            self._ended.notify_all()

    def stop(self, deadline: float) -> list[UnitOfWork]:
        """Quiet, wait until `deadline` (monotonic) for running jobs, then put back what remains
        and cancel its tasks (see `manager.Manager.stop`)."""
        self.quiet()
        with self._ended:
            if self._running:
                log.info("waiting up to %.1f s for %d running job(s)", max(deadline - time.monotonic(), 0), self.busy)
            while self._running and not self._hurry.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ended.wait(remaining)
        leftovers = [unit for unit in list(self._running.values()) if not unit.done]
        self.hard_stop.set()
        if self._main is not None:  # the fetch and the blocking waits end within a blocking timeout
            try:
                self._main.result(self.timeout + 2.0)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                log.warning("the asyncio runner's fetch did not end in time")
        if leftovers:
            log.warning("putting %d unfinished job(s) back on their queues", len(leftovers))
            for unit in leftovers:
                put_back(self.rt, unit)
        if self.loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._end(), self.loop).result(5.0)
            except (concurrent.futures.TimeoutError, RuntimeError) as exc:
                log.warning("the asyncio runner did not end cleanly (%s)", exc)
        self.pool.shutdown(wait=False)
        return leftovers

    async def _end(self) -> None:
        """(On the loop.) Cancel the tasks of jobs put back, send what was acknowledged since, and
        close the connections."""
        for task in list(self._running):
            task.cancel()
        await self._flush()
        if self._lane is not None:
            await self._lane.close()

    def close(self, lane: Any = None) -> None:
        """Send the successes not acknowledged yet (on `lane`, a sync `wire.Lane`)."""
        acks = self._drain()
        if acks and lane is not None:
            self._reserve_sync(lane, acks)

    # -- Fetch, for the units of work (called on the loop or on a pool thread) ---------------------
    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        if outcome.kind == "done":
            self._acknowledge(unit.raw, ops)
            return True
        applied = self.settler.settle(unit, outcome, ops)
        self._forget(unit.raw)
        return applied

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        return self.settler.mark(unit, ops)

    def flush(self) -> None:
        """Successes are sent within their window by the loop."""

    def lost_reply(self) -> None:
        self._suspect = True

    def release(self) -> None:
        """Nothing is taken for others: every job taken starts at once."""

    def retrieve_work(self) -> UnitOfWork | None:
        raise NotImplementedError("the asyncio runner fetches on its loop")  # never a processor's loop

    # -- the pool's side, for `Processor` ---------------------------------------------------------
    def processor_stopped(self, processor: Processor) -> None:
        """Never started as a thread."""

    def processor_died(self, processor: Processor, exc: BaseException) -> None:
        """Never started as a thread."""

    # -- fetching (on the loop) ------------------------------------------------------------------
    async def _fetching(self) -> None:
        self._loop_thread = threading.get_ident()
        self._changed = asyncio.Event()
        self._lane = AsyncLane(self._connect())
        quieting_context(self.quieting)  # the jobs' tasks copy this context: `stopping()` sees it
        delay = BACKOFF_START
        try:
            while not self.quieting.is_set():
                try:
                    await self._fetch_once()
                    delay = BACKOFF_START
                except REDIS_ERRORS as exc:
                    self.rt.outage.down(exc)
                    await self._pause(delay)
                    delay = min(delay * 2, BACKOFF_MAX)
                except Exception as exc:  # a fault outside any job: never a tight loop
                    log.exception("the asyncio runner's fetch failed (%s); again in %.1f s", exc, delay)
                    await self._pause(delay)
                    delay = min(delay * 2, BACKOFF_MAX)
            if self._blocking:
                await asyncio.wait(list(self._blocking.values()))
        finally:
            await self._flush()

    async def _fetch_once(self) -> None:
        if self._alone or self._free() <= 0:  # a job's end pokes
            await self._wait_change(None if self._running else 0.5)
            return
        if self._suspect:
            if self._blocking or self._calls:  # their replies may still add to or take from the list
                await self._wait_change(0.05)
                return
            began = time.monotonic()
            adopted = await self._adopt()
            self.rt.outage.up(began)
            for raw in adopted:
                self._start(queue_of_raw(raw), raw)
            if adopted:
                return
        order = self.order()
        want = self._free() if order else 0
        acks = self._drain()
        began = time.monotonic()
        got = await self._reserve(order, want, acks) if want or acks else []
        self.rt.outage.up(began)
        for key, raw in got:
            self._start(self.keys.queue_name(key), raw)
        if got:
            return
        if not order:  # every queue is paused
            await self._pause(self.timeout)
            return
        await self._idle(order)

    async def _reserve(self, order: list[str], want: int, acks: list[Ack]) -> list[tuple[str, bytes]]:
        """RESERVE (see `fetch.Hub`): up to `want` jobs into the batch list, `acks` out of it."""
        args: list[Any] = [repr(self.clock()), want, len(acks)]
        for raw, ops in acks:
            args += [raw, *ops]
        assert self._lane is not None
        try:
            reply = await self._lane.evalsha(self.scripts.reserve, [*order, self.batch, keys.RESERVATIONS,
                                                                   self.batch], args)
        except BaseException as exc:
            self._acks.extendleft(reversed(acks))  # not applied: kept for the next call
            if isinstance(exc, LOST):
                self._suspect = True  # it may have taken jobs whose reply never came
            raise
        with self._known_lock:
            for raw, _ in acks:
                self._forget_locked(raw)
            for i in range(1, len(reply), 2):
                self._known[reply[i]] += 1
        return [(reply[i].decode(), reply[i + 1]) for i in range(0, len(reply), 2)]

    def _reserve_sync(self, lane: Any, acks: list[Ack]) -> None:
        args: list[Any] = [repr(self.clock()), 0, len(acks)]
        for raw, ops in acks:
            args += [raw, *ops]
        lane.evalsha(self.scripts.reserve, [self.batch, keys.RESERVATIONS, self.batch], args)

    async def _idle(self, order: list[str]) -> None:
        """Nothing anywhere: a BLMOVE per queue (those not waiting already) into the batch list."""
        spread = self.order.spread() or order
        waiters = min(len(spread), self.limit)
        for i in range(waiters):
            if i not in self._blocking and self._free() > 0:
                key = spread[(i + self._turn) % len(spread)]
                self._blocking[i] = asyncio.get_running_loop().create_task(self._block(i, key))
        if len(spread) > waiters:  # fewer places than queues: every queue is watched in turn
            self._turn += 1
        await self._wait_change(self.timeout)

    async def _block(self, i: int, key: str) -> None:
        assert self._lane is not None
        try:
            reply = await self._lane.exchange([("BLMOVE", key, self.batch, "RIGHT", "LEFT", self.timeout)],
                                              timeout=self.timeout + 5.0)
        except LOST as exc:
            self._suspect = True
            self.rt.outage.down(exc)
            return
        except REDIS_ERRORS as exc:
            self.rt.outage.down(exc)
            return
        finally:
            del self._blocking[i]
            self._poke()
        raw = reply[0]
        if raw is not None:
            with self._known_lock:
                self._known[raw] += 1
            self._start(self.keys.queue_name(key), raw)

    async def _adopt(self) -> list[bytes]:
        """Jobs in the batch list that this process did not know of before reading it."""
        assert self._lane is not None
        with self._known_lock:
            known = Counter(self._known)
        held = Counter((await self._lane.exchange([("LRANGE", self.batch, 0, -1)]))[0])
        self._suspect = False
        found = list((held - known).elements())
        with self._known_lock:
            for raw in found:
                self._known[raw] += 1
        return found

    # -- acknowledging -----------------------------------------------------------------------------
    def _acknowledge(self, raw: bytes, ops: list[Any]) -> None:
        self._acks.append((raw, ops))
        if threading.get_ident() == self._loop_thread:
            self._window()
        elif self.loop is not None:  # a success of the thread pool (a sync job)
            self.loop.call_soon_threadsafe(self._window)

    def _window(self) -> None:
        """(On the loop.) The first success since the last call opens a window; a full batch is
        sent at once."""
        assert self.loop is not None
        if len(self._acks) >= ACK_BATCH:
            self._ack_pending = False
            self.loop.create_task(self._flush())
        elif not self._ack_pending and self._acks:
            self._ack_pending = True
            self.loop.call_later(self.ack_window, self._window_ended)

    def _window_ended(self) -> None:
        if self._ack_pending and self._acks and self.loop is not None:
            self.loop.create_task(self._flush())
        self._ack_pending = False

    async def _flush(self) -> None:
        acks = self._drain()
        if not acks:
            return
        self._calls += 1
        try:
            await self._reserve([], 0, acks)
        except REDIS_ERRORS as exc:
            if self._ack_delay == BACKOFF_START:
                log.warning("acknowledging finished jobs failed (%s: %s); they stay reserved and are sent "
                            "again with back-off", type(exc).__name__, exc)
            if self.loop is not None:
                self.loop.call_later(self._ack_delay, self._flush_later)
            self._ack_delay = min(self._ack_delay * 2, BACKOFF_MAX)
            return
        finally:
            self._calls -= 1
            self._poke()
        if self._ack_delay != BACKOFF_START:
            log.warning("finished jobs are acknowledged again")
            self._ack_delay = BACKOFF_START

    def _flush_later(self) -> None:
        if self.loop is not None:
            self.loop.create_task(self._flush())

    def _drain(self) -> list[Ack]:
        self._ack_pending = False  # what this call carries closes the window
        taken: list[Ack] = []
        try:
            while True:
                taken.append(self._acks.popleft())
        except IndexError:
            return taken

    def _forget(self, raw: bytes) -> None:
        with self._known_lock:
            self._forget_locked(raw)

    def _forget_locked(self, raw: bytes) -> None:
        left = self._known[raw] - 1
        if left > 0:
            self._known[raw] = left
        else:
            self._known.pop(raw, None)

    # -- running ---------------------------------------------------------------------------------
    def _free(self) -> int:
        return self.limit - len(self._running) - len(self._blocking)

    def _start(self, queue: str, raw: bytes) -> None:
        """(On the loop.) Run a job just taken, or put it back when the worker is quieting."""
        assert self.loop is not None
        unit = UnitOfWork(queue, raw, self, self.batch)
        if self.quieting.is_set():  # never started: back to the head of its queue, unchanged
            self.loop.create_task(self._in_thread(unit.put_back, [0]))
            return
        tid = self._tids.pop() if self._tids else self._new_tid()
        task = self.loop.create_task(self._run(unit, format(tid, "x")))
        self._running[task] = unit
        task.add_done_callback(lambda done: self._ended_run(done, tid))

    def _new_tid(self) -> int:
        self._next_tid += 1
        return 0xA0000 + self._next_tid  # shown as Sidekiq shows thread ids; apart from real ones

    def _ended_run(self, task: asyncio.Task[None], tid: int) -> None:
        self._running.pop(task, None)
        self._tids.append(tid)
        self._poke()
        if self.quieting.is_set():
            with self._ended:
                self._ended.notify_all()

    async def _run(self, unit: UnitOfWork, tid: str) -> None:
        counters = self.rt.counters
        counters.work.start(tid, unit.queue, unit.raw)
        try:
            await self._process(unit)
        except asyncio.CancelledError:
            if not unit.done:  # cancelled by a hard stop after its put-back: nothing else to do
                raise
        except Exception as exc:  # a fault outside the job's code: file the job, go on
            log.error("the asyncio runner failed on a job (%s: %s); filing it in the dead set",
                      type(exc).__name__, exc, exc_info=exc)
            outcome = invalid(unit.raw, unit.queue, error_class_name(exc),
                              f"sidequest failed while processing this job (not the job's own code): {exc}")
            await self._in_thread(unit.apply, outcome, self.rt.lifecycle.ops("dead", None, outcome))
        finally:
            counters.work.finish(tid)

    async def _process(self, unit: UnitOfWork) -> None:
        side = self.side
        try:
            payload = decode(unit.raw)
        except PayloadError as exc:
            self.rt.counters.failed.incr()
            log.error("payload in queue %r is not a job, moved to the dead set: %s", unit.queue, exc)
            await self._in_thread(side.finish, unit, None, None, invalid(unit.raw, unit.queue, error_class_name(exc),
                                                                         str(exc)))
            return
        recovered = payload.get("recovery_count")
        if isinstance(recovered, int) and not isinstance(recovered, bool) and recovered >= self._suspect_after():
            await self._run_alone(unit, payload, recovered)
            return
        job_class = self._on_the_loop(payload)
        if job_class is None:
            await self._in_thread(side.perform, unit, payload)
            return
        await self._perform(unit, payload, job_class)

    def _suspect_after(self) -> int:
        return max(1, min(SUSPECT_AFTER, self.config.max_recoveries))

    async def _run_alone(self, unit: UnitOfWork, payload: dict[str, Any], recovered: int) -> None:
        """A suspect (see `gate`): no job is taken until the others have ended, then it runs alone."""
        self._alone = True
        try:
            while len(self._running) > 1 and not self.hard_stop.is_set():
                await self._wait_change(0.5)
            log.warning("%s %s: processes died %d times while running it; running it alone",
                        payload["class"], payload.get("jid"), recovered)
            job_class = self._on_the_loop(payload)
            if job_class is None:
                await self._in_thread(self.side.perform, unit, payload)
            else:
                await self._perform(unit, payload, job_class)
        finally:
            self._alone = False
            self._poke()

    def _on_the_loop(self, payload: dict[str, Any]) -> type[Any] | None:
        """The job's class when it takes the common path (see the module), else None."""
        if "expires_at" in payload or len(self.rt.config.server_middleware):
            return None
        try:
            job_class = self.rt.registry.get(payload["class"])
        except UnknownJobError:
            return None
        is_async = self._async_kind.get(job_class)
        if is_async is None:
            is_async = self._async_kind[job_class] = inspect.iscoroutinefunction(getattr(job_class, "perform", None))
        if not is_async or has_ops(self.rt.lifecycle.ops("taken", payload)):
            return None
        return job_class

    async def _perform(self, unit: UnitOfWork, payload: dict[str, Any], job_class: type[Any]) -> None:
        """`Processor.perform` for an `async def` job, on the loop."""
        name, jid = payload["class"], str(payload.get("jid", ""))
        token = job_context.set((name, jid, unit.queue, trace_id(payload) if "traceparent" in payload else None))
        started = time.monotonic()
        log.info("start")
        job = None
        try:
            job = job_class()
            job.jid, job.payload = jid, payload
            limit = payload.get("timeout") or self.rt.config.job_timeout
            limit = float(limit) if isinstance(limit, (int, float)) and limit > 0 else None
            with self.rt.lifecycle.running(payload):
                result = await (job.perform(*payload["args"]) if limit is None else self._timed(job, payload, limit))
        except BaseException as exc:  # a cancellation too, unless a hard stop put the job back
            if unit.done:
                job_context.reset(token)
                raise
            outcome = await self._in_thread(self.side.failed, unit, payload, job, exc, started)
        else:
            elapsed = time.monotonic() - started
            log.info("done: %.3f sec", elapsed)
            outcome = Outcome.done(elapsed, result)
        job_context.reset(token)
        if outcome.kind == "done":  # acknowledged in its window: nothing here waits on Redis
            self.side.finish(unit, payload, job, outcome)
        else:
            await self._in_thread(self.side.finish, unit, outcome.payload or payload, job, outcome)

    @staticmethod
    async def _timed(job: Any, payload: dict[str, Any], limit: float) -> Any:
        """The job's coroutine, cancelled for real past `limit` seconds."""
        try:
            async with asyncio.timeout(limit) as deadline:
                return await job.perform(*payload["args"])
        except TimeoutError:
            if deadline.expired():
                raise JobTimeoutError(f"job ran longer than its {limit:g} s time limit (cancelled)") from None
            raise

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread pool, in this task's context (its log context, its job)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: context.run(fn, *args))

    # -- waiting -----------------------------------------------------------------------------------
    def _poke(self) -> None:
        """Wake the fetch: a place is free, a job arrived, a call ended, or a stop began."""
        if self._changed is None or self.loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._changed.set()
        else:
            self.loop.call_soon_threadsafe(self._changed.set)

    async def _wait_change(self, timeout: float | None = None) -> None:
        """Until `_poke`, or at most `timeout` seconds (None: a job's end or a stop will poke)."""
        assert self._changed is not None
        self._changed.clear()
        if timeout is None:  # the busy path: no timer to make and cancel
            await self._changed.wait()
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    async def _pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.quieting.is_set() and (left := end - time.monotonic()) > 0:
            await self._wait_change(min(left, 0.5))

