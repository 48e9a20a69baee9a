"""One worker thread: gate -> fetch -> decode -> taken -> middleware -> run -> outcome -> apply -> hooks.

Only a job's own code can fail a job. Everything else has a designed path:
- bytes that do not decode (or whose failure cannot be encoded again) are a `dead` outcome,
  kept as they were (`outcome.invalid`), so a bad payload never loops;
- any Redis error of a core call (lost connection, OOM, READONLY, NOPERM, an unknown command)
  is logged once per episode with a count (an outage, or a refusal for an error reply), retried
  with back-off, never a tight loop; a feature's error is that job's fault (`faults`): logged with
  its jid, the job's fate stands;
- a job that was in flight at two crashes of processes (`recovery_count` >= 2) is a suspect and
  runs alone (`gate`), so a poison pill takes no neighbour down with it; a job recovered once
  (an ordinary deploy-time `kill -9`) runs like any other, so recovery is not serialized.
An outcome is applied in one atomic call that checks the job is still ours (`fetch`); hooks
run only after it committed. Anything else that escapes kills only this thread: the pool logs
it, files the job it held in `dead`, and starts a replacement after a back-off.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sidequest.config import Config
from sidequest.errors import Cancelled, OverLimit, PayloadError, UnknownJobError
from sidequest.jobs.payload import decode, overdue, trace_id
from sidequest.jobs.registry import Registry
from sidequest.store.outage import LOST, REDIS_ERRORS, Backoff, RedisOutage
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.executor import Executor
from sidequest.worker.fetch.fetchers import Fetch, UnitOfWork
from sidequest.worker.isolation import Gate, suspect
from sidequest.worker.lifecycle import Lifecycle, has_ops
from sidequest.worker.outcome import EXPIRED, Outcome, error_class_name, invalid
from sidequest.worker.retry import Retrier

log = logging.getLogger(__name__)

# The job running on this thread, for log records: (class, jid, queue, trace id or None); see cli/logs.py.
job_context: contextvars.ContextVar[tuple[str, str, str, str | None] | None] = contextvars.ContextVar(
    "sidequest_job", default=None)

# The pool's quieting event, seen by the job this thread runs (Sidekiq's `Job#interrupted?`): a
# long job can end early at a shutdown instead of being put back at the deadline and started over.
# Set once per processor thread (no per-job cost); a timed job's thread gets a copy of the context.
_quieting: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "sidequest_quieting", default=None)


def quieting_context(event: threading.Event) -> None:
    """Let the jobs run in this context (and contexts copied from it) see `event` (`stopping`)."""
    _quieting.set(event)


def enter_job(unit: UnitOfWork, payload: dict[str, Any]) -> contextvars.Token[Any]:
    """Set the running job's log context (see `job_context`); reset it with the token returned."""
    return job_context.set((payload["class"], str(payload.get("jid", "")), unit.queue,
                            trace_id(payload) if "traceparent" in payload else None))


def time_limit(payload: dict[str, Any], config: Config) -> float | None:
    """The job's time limit in seconds: its `timeout` option, else the worker's `job_timeout`."""
    limit = payload.get("timeout") or config.job_timeout
    return float(limit) if isinstance(limit, (int, float)) and limit > 0 else None


def stopping() -> bool:
    """True once the worker process running this job has been quieted or told to stop; False
    outside a worker. A job that can end early (see `iteration`) checks it between steps."""
    event = _quieting.get()
    return event is not None and event.is_set()


POINT_OF = {"done": "finished", "retry": "retried", "dead": "dead", "dropped": "dropped", "put_back": "put_back",
            "snoozed": "snoozed", "cancelled": "cancelled"}
T = TypeVar("T")


def _kept(box: list[Any], value: T) -> T:
    """Keep a job's return value for its outcome (features may store it: `result_ttl`)."""
    box.append(value)
    return value


class Pool(Protocol):
    """What a processor needs from the pool that runs it (the manager)."""

    quieting: threading.Event
    hard_stop: threading.Event

    def processor_stopped(self, processor: Processor) -> None: ...
    def processor_died(self, processor: Processor, exc: BaseException) -> None: ...


@dataclass
class Runtime:
    """What every processor of one worker process shares."""

    config: Config
    registry: Registry
    counters: ProcessCounters  # processed, failed and the running jobs, flushed by the heartbeat
    retrier: Retrier
    executor: Executor
    identity: str
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    outage: RedisOutage = field(default_factory=RedisOutage)
    gate: Gate = field(default_factory=Gate)


class Processor:
    def __init__(self, runtime: Runtime, fetch: Fetch, pool: Pool, index: int, start_delay: float = 0.0) -> None:
        self.rt = runtime
        self.fetch = fetch
        self.pool = pool
        self.index = index
        self.start_delay = start_delay  # a replacement for a processor that died waits this long
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
        gate = self.rt.gate
        quieting_context(self.pool.quieting)
        try:
            if self.start_delay:
                self.pool.quieting.wait(self.start_delay)
            while not self.pool.quieting.is_set():
                if not gate.enter(lambda: self._settle(self.fetch.flush), timeout=0.5):
                    continue
                try:
                    unit = self._fetch()
                    if unit is None:
                        continue
                    if self.pool.quieting.is_set():
                        self._settle(functools.partial(unit.put_back, [0]))  # never taken: nothing to record
                        break
                    self.process(unit)
                finally:
                    if gate.closed:  # someone waits to run a recovered job alone: hold nothing
                        self._settle(self.fetch.flush)
                    gate.leave()
            self._settle(self.fetch.flush)
            self._settle(self.fetch.release)
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
        self.rt.counters.work.start(self.tid, unit.queue, unit.raw)
        try:
            try:
                payload = decode(unit.raw)
            except PayloadError as exc:
                self.rt.counters.failed.incr()
                log.error("payload in queue %r is not a job, moved to the dead set: %s", unit.queue, exc)
                self.finish(unit, None, None, invalid(unit.raw, unit.queue, error_class_name(exc), str(exc)))
            else:
                if self._isolate(unit, payload):
                    try:
                        self.perform(unit, payload)
                    finally:
                        self.rt.gate.release(self.index)
        finally:
            self.rt.counters.work.finish(self.tid)
        # Cleared only on a normal return: if anything escaped, the pool still sees the unit
        # in hand and files it when it replaces this processor.
        self.unit = None

    def _isolate(self, unit: UnitOfWork, payload: dict[str, Any]) -> bool:
        """True when the job may run now: at once, or (a suspect, see `gate`) once it is alone."""
        recovered = suspect(payload, self.rt.config.max_recoveries)
        if recovered is None:
            return True
        if self.rt.gate.isolate(self.index, give_up=self.pool.quieting.is_set):
            log.warning("%s %s: processes died %d times while running it; running it alone",
                        payload["class"], payload.get("jid"), recovered)
            self._settle(self.fetch.hand_back)  # alone: nothing else held, so nothing else counted if it kills us
            return True
        self.wait_turn(unit)
        return False

    def wait_turn(self, unit: UnitOfWork) -> None:
        """Another job runs alone now (see `gate`): this one goes back to its queue, unchanged,
        through any outage, and is fetched again once the gate opens."""
        self._settle(lambda: unit.put_back([0]))

    def perform(self, unit: UnitOfWork, payload: dict[str, Any]) -> None:
        """Run a decoded job to its outcome and apply it (the asyncio runner's path for every job
        but its common one, too: see `eventloop`)."""
        late = overdue(payload, self.rt.retrier.clock()) if "expires_at" in payload else None  # most: no clock
        if late is not None:
            self._expire(unit, payload, late)
            return
        try:
            job_class = self.rt.registry.get(payload["class"])
        except UnknownJobError as exc:
            self._unknown(unit, payload, exc)
            return
        ops = self.rt.lifecycle.ops("taken", payload)
        taken = True if not has_ops(ops) else self.taken(unit, ops)  # most jobs: no call
        if not taken:
            self.skip(unit, payload, taken)
            return
        token = enter_job(unit, payload)
        started = time.monotonic()
        log.info("start")
        job = None
        try:
            job = job_class()
            job.jid, job.payload = str(payload.get("jid", "")), payload
            args = payload["args"]
            limit = time_limit(payload, self.rt.config)
            returned: list[Any] = []  # what the job itself returned (middleware may return anything)
            with self.rt.lifecycle.running(payload):
                self.rt.config.server_middleware.invoke(
                    job, payload, unit.queue, final=lambda: _kept(returned, self.rt.executor.run(job, args, limit)))
        except BaseException as exc:  # SystemExit from a job's sys.exit() is a job failure too
            outcome = self.failed(unit, payload, job, exc, started)
        else:
            elapsed = time.monotonic() - started
            log.info("done: %.3f sec", elapsed)
            outcome = Outcome.done(elapsed, returned[0] if returned else None)
        finally:
            job_context.reset(token)
        self.finish(unit, outcome.payload or payload, job, outcome)

    def taken(self, unit: UnitOfWork, ops: list[Any]) -> bool | None:
        """Write the features' `taken` operations through any outage (see `_settle`)."""
        return self._settle(lambda: unit.taken(ops))

    @staticmethod
    def skip(unit: UnitOfWork, payload: dict[str, Any], taken: bool | None) -> None:
        """A job not run because its `taken` operations were not written: False, it is no longer
        ours; None, Redis stayed down past the hard deadline (shutdown puts it back)."""
        if taken is False:
            log.warning("%s %s was recovered by another process before it started here; skipped",
                        payload["class"], payload.get("jid"))
            unit.done = True

    def failed(self, unit: UnitOfWork, payload: dict[str, Any], job: Any, exc: BaseException,
               started: float) -> Outcome:
        """The outcome of a run that raised `exc` (logged here, in the job's log context)."""
        if isinstance(exc, (OverLimit, Cancelled)):  # the job stopped itself: not a failure, no retry spent
            return dataclasses.replace(self._control(unit, payload, exc), elapsed=time.monotonic() - started)
        self.rt.counters.failed.incr()
        elapsed = time.monotonic() - started
        log.warning("fail: %.3f sec: %s: %s", elapsed, error_class_name(exc), exc, exc_info=exc)
        return dataclasses.replace(self._decide(job, unit, exc), elapsed=elapsed)

    def _expire(self, unit: UnitOfWork, payload: dict[str, Any], late: float) -> None:
        """A job past its deadline (`expires_in`, Sidekiq Pro's `expires_at`): dropped unstarted."""
        log.info("%s %s expired %.1f s ago (expires_in=%s): dropped without running", payload["class"],
                 payload.get("jid"), late, payload.get("expires_in"))
        self.finish(unit, payload, None, Outcome("dropped", payload=payload, reason=EXPIRED))

    def _unknown(self, unit: UnitOfWork, payload: dict[str, Any], exc: UnknownJobError) -> None:
        """A job this worker does not run: one line (no traceback: nothing of the job's ran) and
        Sidekiq's fate for a class it cannot find, a failure retried with back-off.

        Not dropped, not dead at once: it is a job someone wants run. On a shared Redis it may be
        another project's job in a queue both work (that project's workers may take the retry),
        or a job of a newer deploy that this older worker does not know yet (the new workers run
        the retry). Not put straight back: two workers would pass it between them without a
        pause. After its retries (about 20 days by default) it is dead, where the dashboard
        shows it with this message."""
        self.rt.counters.failed.incr()
        outcome = self._decide(None, unit, exc)
        log.warning("%s %s: %s; %s", payload["class"], payload.get("jid"), exc, self.rt.retrier.fate(outcome))
        self.finish(unit, outcome.payload or payload, None, dataclasses.replace(outcome, logged=True))

    def _decide(self, job: Any, unit: UnitOfWork, exc: BaseException) -> Outcome:
        """The retrier's outcome for the payload as fetched (not what middleware changed)."""
        try:
            return self.rt.retrier.decide(job, decode(unit.raw), unit.raw, unit.queue, exc)
        except Exception as bug:  # a fault outside the job's code must not decide its fate twice
            log.exception("could not decide the outcome of a failed job; filing it in the dead set")
            return invalid(unit.raw, unit.queue, error_class_name(bug), f"{error_class_name(exc)}: {exc}")

    def _control(self, unit: UnitOfWork, payload: dict[str, Any], exc: OverLimit | Cancelled) -> Outcome:
        """A job that stopped itself: cancelled (it ends), or a full rate limit (back to `schedule`)."""
        if isinstance(exc, Cancelled):
            log.info("cancelled: %s", exc)
            return Outcome("cancelled", payload=payload, reason=str(exc))
        try:
            outcome = self.rt.retrier.snooze(decode(unit.raw), unit.raw, unit.queue, exc.delay)
        except Exception as bug:  # a fault outside the job's code must not decide its fate twice
            log.exception("could not snooze a job; filing it in the dead set")
            return invalid(unit.raw, unit.queue, error_class_name(bug), f"{error_class_name(exc)}: {exc}")
        log.info("snoozed: %s; again in %.1f s", exc, (outcome.at or 0.0) - self.rt.retrier.clock())
        return outcome

    def finish(self, unit: UnitOfWork, payload: dict[str, Any] | None, job: Any, outcome: Outcome) -> None:
        if unit.done:  # put back by a hard shutdown while it ran
            return
        self.rt.counters.processed.incr()
        ops = self.rt.lifecycle.ops(POINT_OF[outcome.kind], payload, outcome)
        applied = self._settle(lambda: unit.apply(outcome, ops))
        if applied:
            self.rt.lifecycle.observe(POINT_OF[outcome.kind], payload, outcome)
            args = (payload or {}).get("args")
            self.rt.retrier.after(outcome, job, args if isinstance(args, list) else [], unit.queue)
        elif applied is False:
            log.warning("the %s outcome of %s was not written: this processor no longer held the job "
                        "(another process recovered it, and its copy is the live one)",
                        outcome.kind, (payload or {}).get("jid", "a job"))

    def _settle(self, action: Callable[[], T]) -> T | None:
        """Run a Redis action that ends a job's stay here, through any Redis outage.

        It gives up (None) only when the pool's hard deadline has passed; under reliable fetch
        the job then stays reserved and is recovered, so it runs again rather than being lost.
        """
        try:
            return action()  # most calls: no back-off to keep
        except REDIS_ERRORS as exc:
            self.rt.outage.down(exc)
        backoff = Backoff()
        while True:
            if self.pool.hard_stop.wait(backoff.failed()):
                log.error("gave up finishing a job while Redis was unavailable; it stays reserved")
                return None
            try:
                return action()
            except REDIS_ERRORS as exc:
                self.rt.outage.down(exc)
