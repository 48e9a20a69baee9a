"""One worker thread: gate -> fetch -> the job-run step (`job_run`) -> again, until quieted.

The thread's loop around the step: it passes the isolation gate before each fetch (a suspect
runs alone, see `isolation`), fetches with back-off through a Redis outage, decodes, waits its
turn for a suspect, and hands the job to `JobRun.run`. Anything that escapes kills only this
thread: its runner (`thread_runner`) logs it, files the job it held in `dead`, and starts a
replacement after a back-off.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Protocol

from sidequest.errors import PayloadError
from sidequest.jobs.payload import decode
from sidequest.store.outage import LOST, REDIS_ERRORS, Backoff
from sidequest.worker.fetch.fetchers import Fetch, UnitOfWork
from sidequest.worker.isolation import suspect

# `Runtime`, `job_context` and `stopping` lived here; features and the CLI import them from here.
from sidequest.worker.job_run import JobRun, quieting_context
from sidequest.worker.job_run import Runtime as Runtime
from sidequest.worker.job_run import job_context as job_context
from sidequest.worker.job_run import stopping as stopping


class Pool(Protocol):
    """What a processor needs from the runner that runs it (`thread_runner.ThreadRunner`)."""

    quieting: threading.Event
    hard_stop: threading.Event

    def processor_stopped(self, processor: Processor) -> None: ...
    def processor_died(self, processor: Processor, exc: BaseException) -> None: ...


class Processor:
    def __init__(self, runtime: Runtime, fetch: Fetch, pool: Pool, index: int, start_delay: float = 0.0) -> None:
        self.rt = runtime
        self.fetch = fetch
        self.pool = pool
        self.index = index
        self.start_delay = start_delay  # a replacement for a processor that died waits this long
        self.step = JobRun(runtime, pool.hard_stop)
        self.unit: UnitOfWork | None = None  # the job in hand, for hard shutdown
        self._tid: str | None = None
        self._backoff = Backoff()  # between failed fetches (the asyncio runner's fetch has one too)
        self.thread = threading.Thread(target=self.run, name=f"sidequest-processor-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    @property
    def tid(self) -> str:
        """The thread id as Sidekiq shows it (hex); worked out once, on the thread itself."""
        if self._tid is None:
            self._tid = format(self.thread.ident or 0, "x")
        return self._tid

    def run(self) -> None:
        gate, settle = self.rt.gate, self.step.settle
        quieting_context(self.pool.quieting)
        try:
            if self.start_delay:
                self.pool.quieting.wait(self.start_delay)
            while not self.pool.quieting.is_set():
                if not gate.enter(lambda: settle(self.fetch.flush), timeout=0.5):
                    continue
                try:
                    unit = self._fetch()
                    if unit is None:
                        continue
                    if self.pool.quieting.is_set():
                        settle(functools.partial(unit.put_back, [0]))  # never taken: nothing to record
                        break
                    self.process(unit)
                finally:
                    if gate.closed:  # someone waits to run a recovered job alone: hold nothing
                        settle(self.fetch.flush)
                    gate.leave()
            settle(self.fetch.flush)
            settle(self.fetch.release)
        except BaseException as exc:  # thread boundary: report and let the pool replace us
            self.pool.processor_died(self, exc)
        else:
            self.pool.processor_stopped(self)

    def _fetch(self) -> UnitOfWork | None:
        began = time.monotonic()
        try:
            unit = self.fetch.retrieve_work()
        except REDIS_ERRORS as exc:
            if isinstance(exc, LOST):
                self.fetch.lost_reply()  # it may have taken a job whose reply never came
            self.rt.outage.down(exc)
            self.pool.quieting.wait(self._backoff.failed())
            return None
        if self.fetch.answered:  # it may have waited on another processor's call instead
            self._backoff.reset()
            self.rt.outage.up(began)
        return unit

    def process(self, unit: UnitOfWork) -> None:
        self.unit = unit
        tid = self.tid
        self.rt.counters.work.start(tid, unit.queue, unit.raw)
        try:
            try:
                payload = decode(unit.raw)
            except PayloadError as exc:
                self.step.unreadable(unit, exc)
            else:
                if "recovery_count" not in payload or self._isolate(unit, payload):  # most: never recovered
                    try:
                        self.step.run(unit, payload)
                    finally:
                        self.rt.gate.release(self.index)
        finally:
            self.rt.counters.work.finish(tid)
        # Cleared only on a normal return: if anything escaped, the pool still sees the unit
        # in hand and files it when it replaces this processor.
        self.unit = None

    def _isolate(self, unit: UnitOfWork, payload: dict[str, Any]) -> bool:
        """True when the job may run now: at once, or (a suspect, see `isolation`) once it is alone."""
        recovered = suspect(payload, self.rt.config.max_recoveries)
        if recovered is None:
            return True
        if self.rt.gate.isolate(self.index, give_up=self.pool.quieting.is_set):
            self.step.alone(payload, recovered)
            self.step.settle(self.fetch.hand_back)  # alone: nothing else held, so nothing else counted if it kills us
            return True
        self.step.wait_turn(unit)
        return False
