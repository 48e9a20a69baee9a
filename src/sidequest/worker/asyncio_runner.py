"""The asyncio runner: `async def` jobs fetched, run and acknowledged on one event loop.

With `runner: asyncio` (or `auto`, the default, when every job the worker runs is `async def`),
the process's own capsule has no processor threads: `async_jobs` jobs (100 by default) run at
once as tasks of the process's event loop, and the Redis traffic of fetching and acknowledging
is sent on that loop too, through `store.direct.AsyncDirectPath` (redis.asyncio, hiredis): on the
loop's one shared connection (`store.shared_connection`), with the jobs' own commands, but for
the blocking BLMOVE.

- **Fetch and acknowledge** (`fetch.loop_fetch`): the threads' `fetch.batch.BatchList` contract on
  the loop: the same RESERVE into the same batch list, the same acknowledgement window
  (docs/reliability.md); when no queue has work, a BLMOVE per queue, so a job pushed to an idle
  worker starts about one round trip later. It hands each job it takes to `AsyncioRunner.take`.
- **Run**: the job-run step (`job_run.JobRun`), the one a processor thread runs. For a job
  that decodes, is registered, is `async def`, with no server middleware, its decisions run on
  the loop and only the call of the job's code differs: its coroutine is awaited, so such jobs
  run `async_jobs` at once; its features' `taken` operations (`result_ttl`, `expires_in`, a
  unique claim until start) are one SETTLE call on the loop's lane, and a success is
  acknowledged in its window. What may block runs on a pool of `concurrency` threads: a
  failure's outcome (the job's `retry_in`), every outcome but success (its SETTLE call, the
  retrier's hooks), and the whole step for every other job (a sync job, a payload that does not
  decode, a job past its deadline, an unknown name, server middleware: its links are sync).
- **Time limits** cancel the job's task for real (`JobTimeoutError`, the retry path); what is a
  time-out is one rule, the threads' too (`executor.limited`).
- **Suspects** (a job in flight at two crashes, see `isolation`) run alone, through the
  process's gate as on the threads: fetching pauses until the other jobs of the loop have ended,
  its BLMOVEs have answered and no processor thread (another capsule's) is past the gate.
- **Stop**: the staged shutdown of every runner (`runner.StagedShutdown`); each job still
  running at the deadline is put back at the head of its queue, then its task is cancelled.

Redis Cluster mode runs the threads (the batch list is one per queue there; see `fetch`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import redis

from sidequest.config import Config
from sidequest.errors import PayloadError
from sidequest.jobs.payload import call_arguments, decode
from sidequest.store.direct import AsyncDirectPath, DirectPath
from sidequest.store.outage import REDIS_ERRORS
from sidequest.store.scripts import Scripts
from sidequest.worker.executor import limited, time_limit
from sidequest.worker.fetch.batch import ACK_WINDOW
from sidequest.worker.fetch.loop_fetch import LoopFetch
from sidequest.worker.fetch.queue_order import PausedQueues
from sidequest.worker.fetch.unit import Fetch, Settler, UnitOfWork
from sidequest.worker.isolation import suspect
from sidequest.worker.job_run import JobRun, Runtime, job_context, quieting_context
from sidequest.worker.lifecycle import has_ops
from sidequest.worker.outcome import Outcome
from sidequest.worker.runner import StagedShutdown

log = logging.getLogger(__name__)

T = TypeVar("T")
LOOP = -1  # the event loop, at the gate (processors are numbered from 0)
_END = object()  # tells a thread of `DaemonPool` to end


def runs_on_the_loop(job_classes: list[type[Any]]) -> bool:
    """`runner: auto`'s rule: every job the worker runs is `async def` (and there is one)."""
    return bool(job_classes) and all(inspect.iscoroutinefunction(getattr(c, "perform", None)) for c in job_classes)


class AsyncioRunner(StagedShutdown):
    """Runs one capsule's jobs as tasks of the process's event loop: the `runner.Runner` the
    launcher starts and stops, and the `loop_fetch.Runs` its fetch (`hub`) feeds."""

    def __init__(self, runtime: Runtime, config: Config, identity: str, scripts: Scripts,
                 loop: Callable[[], asyncio.AbstractEventLoop], *, client: redis.Redis,
                 connect: Callable[[], Any], close_clients: Callable[[], Awaitable[None]] | None = None,
                 paused: PausedQueues | None = None, clock: Callable[[], float] = time.time,
                 ack_window: float = ACK_WINDOW) -> None:
        if scripts.keys.cluster:
            raise ValueError("the asyncio runner needs one Redis (Cluster mode runs the threads)")
        super().__init__(runtime.lifecycle)
        self.rt = runtime
        self.config = config
        self.limit = config.async_jobs
        self.hub = LoopFetch(config, identity, scripts, self, runtime.outage, self.quieting, paused=paused, clock=clock,
                           ack_window=ack_window)
        self.batch = self.hub.batch  # every job of this capsule is held there
        self.step = JobRun(runtime, self.hard_stop)
        self.settler = Settler(config, client, scripts, clock)  # the thread pool's SETTLE calls
        # a unit of work calls only `apply` and `mark` of its fetch (the loop fetches on its own)
        self._ends = cast("Fetch", _LoopEnds(self.hub, self.settler))
        self._loop_of = loop
        self.loop: asyncio.AbstractEventLoop | None = None
        self._connect = connect  # a redis.asyncio client of the worker's Redis, made on the loop
        self._close_clients = close_clients  # at the end, on the loop: the clients its jobs made there
        self.pool = DaemonPool(config.concurrency)
        self._running: dict[UnitOfWork, asyncio.Task[None]] = {}
        self._tids: list[str] = []  # thread ids of ended tasks, for the next ones
        self._next_tid = 0
        self._alone = False  # a suspect waits to run alone: take no job meanwhile
        self._in_gate = False  # the loop is past the process's gate (see `room`)
        self._main: concurrent.futures.Future[None] | None = None
        self._async_kind: dict[type, bool] = {}
        self._told_middleware = False
        self._lane: AsyncDirectPath | None = None

    # -- the launcher's side (`runner.Runner`) -----------------------------------------------------
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
        return [self.hub.keys.queue_name(key) for key in self.hub.order.keys]

    def batch_of(self, queue: str) -> str:
        return self.batch

    def close(self, lane: DirectPath) -> None:
        """Send the successes not acknowledged yet (on `lane`, a sync lane)."""
        self.hub.flush_sync(lane)

    def quiet(self) -> None:
        super().quiet()
        self.hub.poke()

    # -- the staged shutdown's questions (see `runner`) -------------------------------------------
    def _waits_for(self) -> bool:
        return bool(self._running)

    def _unfinished(self) -> list[UnitOfWork]:
        return [unit for unit in list(self._running) if not unit.done]

    def _end_fetches(self) -> None:
        if self._main is not None:  # the fetch and the blocking waits end within a blocking timeout
            try:
                self._main.result(self.hub.timeout + 2.0)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                log.warning("the asyncio runner's fetch did not end in time")

    def stop(self, deadline: float) -> list[UnitOfWork]:
        """The staged shutdown (`runner`), then the tasks of jobs put back cancelled, the last
        successes sent and the connections closed."""
        leftovers = super().stop(deadline)
        if self.loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._end(), self.loop).result(5.0)
            except (concurrent.futures.TimeoutError, RuntimeError) as exc:
                log.warning("the asyncio runner did not end cleanly (%s)", exc)
        self.pool.shutdown()
        self.settler.lane.close()
        return leftovers

    async def _end(self) -> None:
        """(On the loop.) Cancel the tasks of jobs put back, send what was acknowledged since, and
        close the connections."""
        for task in list(self._running.values()):
            task.cancel()
        self._leave_gate()
        await self.hub.settle_background()
        await self.hub.flush()
        if self._lane is not None:
            await self._lane.close()
        if self._close_clients is not None:  # the jobs' own (`sidequest.aio.redis()`), made on this loop
            await self._close_clients()

    # -- the fetch's side (`loop_fetch.Runs`), on the loop -----------------------------------------
    async def _fetching(self) -> None:
        quieting_context(self.quieting)  # the jobs' tasks copy this context: `stopping()` sees it
        self._lane = AsyncDirectPath(self._connect())
        await self.hub.fetching(self._lane)

    def room(self) -> int:
        """Jobs that may start now: none while a suspect isolates (see `isolation`; the loop
        passes the process's gate before it fetches, and leaves it while another isolates, once
        it holds nothing)."""
        if self._alone:
            return 0
        gate = self.rt.gate
        if not self._in_gate:
            if not gate.try_enter():
                return 0
            self._in_gate = True
        elif gate.closed and gate.owner() != LOOP:
            if not self._running and not self.hub.waiting():
                self._leave_gate()
            return 0
        return self.limit - len(self._running)

    def _leave_gate(self) -> None:
        if self._in_gate:
            self._in_gate = False
            self.rt.gate.leave()

    def running(self) -> int:
        return len(self._running)

    def take(self, queue: str, raw: bytes) -> None:
        """Run a job just taken, or put it back when the worker is quieting."""
        assert self.loop is not None
        unit = UnitOfWork(queue, raw, self._ends, self.batch)
        if self.quieting.is_set():  # never started: back to the head of its queue, unchanged
            self.hub.background(self._in_thread(unit.put_back, [0]))
            return
        tid = self._tids.pop() if self._tids else self._new_tid()
        task = self.loop.create_task(self._run(unit, tid))
        if not task.done():  # an eager task factory may have run it to its end already
            self._running[unit] = task

    def _new_tid(self) -> str:
        self._next_tid += 1
        return format(0xA0000 + self._next_tid, "x")  # shown as Sidekiq shows thread ids; apart from real ones

    # -- a job's task ------------------------------------------------------------------------------
    async def _run(self, unit: UnitOfWork, tid: str) -> None:
        """A job's task. It ends its own stay in `_running` (no done callback: a task is cancelled
        before its first step only by `_end`, after which nothing reads `_running`)."""
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
            await self._in_thread(self.step.fault, unit, exc)
        finally:
            counters.work.finish(tid)
            self._running.pop(unit, None)
            self._tids.append(tid)
            self.hub.poke()
            if self.quieting.is_set():
                with self._changed:
                    self._changed.notify_all()

    async def _process(self, unit: UnitOfWork) -> None:
        try:
            payload = decode(unit.raw)
        except PayloadError as exc:
            await self._in_thread(self.step.unreadable, unit, exc)
            return
        recovered = suspect(payload, self.config.max_recoveries) if "recovery_count" in payload else None
        if recovered is None:  # most jobs: never recovered, no call
            await self.perform(unit, payload)
        else:
            await self._run_alone(unit, payload, recovered)

    async def _run_alone(self, unit: UnitOfWork, payload: dict[str, Any], recovered: int) -> None:
        """A suspect (see `isolation`): the gate closes, no job is taken until every other job of
        the loop has ended, its BLMOVEs have answered and no processor thread is past the gate,
        then it runs alone. While another suspect isolates, it goes back to its queue, unchanged."""
        gate = self.rt.gate
        if self._alone or not gate.claim(LOOP):
            await self._in_thread(self.step.wait_turn, unit)
            return
        self._alone = True
        try:
            while len(self._running) > 1 or self.hub.waiting() or not gate.alone(LOOP):
                if self.quieting.is_set():  # as a processor's `gate.isolate` gives up: put back, never run
                    await self._in_thread(self.step.wait_turn, unit)  # at a stop; nothing if stop did it
                    return
                await self.hub.wait_change(0.5)  # a job's end or a fetch's pokes; threads leave unseen
            self.step.alone(payload, recovered)
            await self.perform(unit, payload)
        finally:
            self._alone = False
            gate.release(LOOP)
            self.hub.poke()

    async def perform(self, unit: UnitOfWork, payload: dict[str, Any]) -> None:
        """The job-run step (`JobRun.run`) with the job's coroutine awaited on the loop (every
        other job takes it whole on the pool)."""
        step = self.step
        job_class = self._on_the_loop(payload)
        if job_class is None:
            await self._in_thread(step.run, unit, payload)
            return
        ops = self.rt.lifecycle.ops("taken", payload)
        if has_ops(ops) and not await self._taken(unit, payload, ops):
            return
        token = step.enter(unit, payload)
        started = time.monotonic()
        job = None
        try:
            job = step.job(job_class, payload)
            limit = time_limit(payload, self.rt.config)
            with self.rt.lifecycle.running(payload):
                args, kwargs = call_arguments(payload)
                called = job.perform(*args, **kwargs)
                result = await (called if limit is None else limited(called, limit))
        except BaseException as exc:  # a cancellation too, unless a hard stop put the job back
            if unit.done:
                job_context.reset(token)
                raise
            outcome = await self._in_thread(step.failed, unit, payload, job, exc, started)
        else:
            outcome = step.done(started, result)
        job_context.reset(token)
        if outcome.kind == "done":  # acknowledged in its window: nothing here waits on Redis
            step.finish(unit, payload, job, outcome)
        else:
            await self._in_thread(step.finish, unit, outcome.payload or payload, job, outcome)

    def _on_the_loop(self, payload: dict[str, Any]) -> type[Any] | None:
        """The job's class when its step runs on the loop (see the module), else None."""
        if len(self.rt.config.server_middleware):  # its links are sync calls around the job
            if not self._told_middleware:
                self._told_middleware = True
                links = ", ".join(map(repr, self.rt.config.server_middleware))
                log.warning("server middleware is installed (%s): async jobs run through the thread pool, %d at "
                            "once, instead of on the event loop", links, self.config.concurrency)
            return None
        job_class = self.step.admit(payload)
        if job_class is None:  # refused (past its deadline, unknown): filed on the pool
            return None
        is_async = self._async_kind.get(job_class)
        if is_async is None:
            is_async = self._async_kind[job_class] = inspect.iscoroutinefunction(getattr(job_class, "perform", None))
        return job_class if is_async else None

    async def _taken(self, unit: UnitOfWork, payload: dict[str, Any], ops: list[Any]) -> bool:
        """The features' `taken` operations (`JobRun.take`) as one SETTLE call on the loop's lane,
        so such jobs keep `async_jobs` in flight. A Redis error (an outage, an error reply) hands
        the call to the step on the pool (again through the outage, or its fate decided there)."""
        assert self._lane is not None
        try:
            reply = await self._lane.evalsha(self.settler.scripts.settle, *self.settler.mark_call(unit, ops))
        except REDIS_ERRORS:
            return await self._in_thread(self.step.take, unit, payload, ops)
        taken = self.settler.written(reply, unit.raw)
        if not taken:
            self.step.skip(unit, payload, taken)
        return taken

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread pool, in this task's context (its log context, its job)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: context.run(fn, *args))


class _LoopEnds:
    """How the loop's units of work end: a success joins the loop's acknowledgement window (no
    call of its own); any other outcome, and the features' `taken` operations, is one SETTLE
    call, sent from the runner's thread pool."""

    def __init__(self, hub: LoopFetch, settler: Settler) -> None:
        self.hub = hub
        self.settler = settler
        self.reserved = hub.batch

    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        if outcome.kind == "done":
            self.hub.acknowledge(unit.raw, ops)
            return True
        applied = self.settler.settle(unit, outcome, ops)
        self.hub.forget(unit.raw)
        return applied

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        return self.settler.mark(unit, ops)


class DaemonPool(concurrent.futures.Executor):
    """A pool of daemon threads for `loop.run_in_executor`: a sync job still running when the
    process exits is abandoned with it, as a processor thread is (see `runner`), where the
    standard pool's threads would hold the exit until the job returns. Its threads are started
    as work comes, up to `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()  # (future, call), or _END
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._work.put((future, lambda: fn(*args, **kwargs)))
        with self._lock:
            if len(self._threads) < self.size:
                thread = threading.Thread(target=self._serve, name=f"sidequest-sync-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """End the idle threads (one still running a sync job ends with it, or with the process)."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._work.put(_END)
        if wait:
            for thread in threads:
                thread.join(1.0)

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            if work is _END:
                return
            future, call = work
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:  # handed to the awaiting task
                    future.set_exception(exc)
