"""The one job-run step, shared by both runners: a job's bytes to its fate applied, then its hooks.

    decode -> isolation check -> taken -> middleware -> perform -> outcome -> apply -> hooks

`JobRun` holds every decision of that step and the calls that apply them. A processor thread
(`processor`) runs it whole on its thread (`JobRun.run`). The asyncio runner's coroutine
(`asyncio_runner`) runs the same methods for an `async def` job and differs only in the call of
the job's own code (it awaits the coroutine) and in where a call that may block runs (on its
thread pool: a failure's outcome, an outcome other than success); every other job (a sync one,
one past its deadline, an unknown name, server middleware) takes `JobRun.run` on that pool.

Only a job's own code can fail a job. Everything else has a designed path:
- bytes that do not decode (or whose failure cannot be encoded again) are a `dead` outcome,
  kept as they were (`outcome.invalid`), so a bad payload never loops;
- any Redis error of a core call (lost connection, OOM, READONLY, NOPERM, an unknown command)
  is logged once per episode with a count (an outage, or a refusal for an error reply), retried
  with back-off (`settle`), never a tight loop; a feature's error is that job's fault (`faults`):
  logged with its jid, the job's fate stands;
- a job that was in flight at two crashes of processes (`recovery_count` >= 2) is a suspect and
  runs alone (`isolation`): each runner waits its own way, the rule (`suspect`) is one;
- a fault outside any job's code files the job it held in `dead` (`fault`), its bytes kept.
An outcome is applied in one atomic call that checks the job is still ours (`fetch.unit`);
hooks run only after it committed.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sidequest.config import Config
from sidequest.errors import Cancelled, OverLimit, PayloadError, Retry, Suspended, UnknownJobError
from sidequest.jobs.active_job import job_name
from sidequest.jobs.payload import call_arguments, decode, display_name, overdue, trace_id
from sidequest.jobs.registry import Registry
from sidequest.store.outage import REDIS_ERRORS, Backoff, RedisOutage
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.executor import Executor, time_limit
from sidequest.worker.fetch.unit import UnitOfWork
from sidequest.worker.isolation import Isolation
from sidequest.worker.lifecycle import Lifecycle, has_ops
from sidequest.worker.outcome import EXPIRED, Outcome, error_class_name, invalid
from sidequest.worker.retry import Retrier

log = logging.getLogger(__name__)

T = TypeVar("T")

# The running job: (class, jid, queue, trace id or None, payload), for log records (cli/logs.py
# reads the first four) and `sidequest.current_job()` (worker/current.py), made only when asked.
job_context: contextvars.ContextVar[tuple[str, str, str, str | None, dict[str, Any]] | None] = \
    contextvars.ContextVar("sidequest_job", default=None)

# The runner's quieting event, seen by the job it runs (Sidekiq's `Job#interrupted?`): a long job
# can end early at a shutdown instead of being put back at the deadline and started over. Set
# once per processor thread or loop (no per-job cost); a timed job's thread gets a copy of the context.
_quieting: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "sidequest_quieting", default=None)

# outcome kind -> the lifecycle point it is applied at
POINT_OF = {"done": "finished", "retry": "retried", "dead": "dead", "dropped": "dropped", "put_back": "put_back",
            "snoozed": "snoozed", "cancelled": "cancelled"}


def quieting_context(event: threading.Event) -> None:
    """Let the jobs run in this context (and contexts copied from it) see `event` (`stopping`)."""
    _quieting.set(event)


def stopping() -> bool:
    """True once the worker process running this job has been quieted or told to stop; False
    outside a worker. A job that can end early (see `iteration`) checks it between steps."""
    event = _quieting.get()
    return event is not None and event.is_set()


def _kept(box: list[Any], value: T) -> T:
    """Keep a job's return value for its outcome (features may store it: `result_ttl`)."""
    box.append(value)
    return value


@dataclass
class Runtime:
    """What every job run of one worker process shares."""

    config: Config
    registry: Registry
    counters: ProcessCounters  # processed, failed and the running jobs, flushed by the heartbeat
    retrier: Retrier
    executor: Executor
    identity: str
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    outage: RedisOutage = field(default_factory=RedisOutage)
    gate: Isolation = field(default_factory=Isolation)


class JobRun:
    """One runner's job-run step: the decisions of a run and the calls that apply them, through
    any Redis outage until the runner's `hard_stop`."""

    def __init__(self, runtime: Runtime, hard_stop: threading.Event) -> None:
        self.rt = runtime
        self.hard_stop = hard_stop

    # -- the whole step, on the calling thread ---------------------------------------------------
    def run(self, unit: UnitOfWork, payload: dict[str, Any]) -> None:
        """Run a decoded job that may run now to its outcome, apply it, run the hooks (a
        processor's path; the asyncio runner's, on its pool, for every job but `async def` ones)."""
        job_class = self.admit(payload)
        if job_class is None:
            self.refuse(unit, payload)
            return
        ops = self.rt.lifecycle.ops("taken", payload)
        if has_ops(ops) and not self.take(unit, payload, ops):  # most jobs: no call
            return
        job = None  # until it is made: a constructor that raises is the job's failure too
        token = self.enter(unit, payload)
        started = time.monotonic()
        try:
            job = self.job(job_class, payload)
            args, kwargs = call_arguments(payload)
            limit = time_limit(payload, self.rt.config)
            returned: list[Any] = []  # what the job itself returned (middleware may return anything)
            with self.rt.lifecycle.running(payload):
                self.rt.config.server_middleware.invoke(job, payload, unit.queue, final=lambda: _kept(
                    returned, self.rt.executor.run(job, args, limit, kwargs)))
        except BaseException as exc:  # SystemExit from a job's sys.exit() is a job failure too
            outcome = self.failed(unit, payload, job, exc, started)
        else:
            outcome = self.done(started, returned[0] if returned else None)
        finally:
            job_context.reset(token)
        self.finish(unit, outcome.payload or payload, job, outcome)

    # -- before the job's code -------------------------------------------------------------------
    def unreadable(self, unit: UnitOfWork, exc: PayloadError) -> None:
        """Bytes that are not a job: to the dead set, kept as they were."""
        self.rt.counters.failed.incr()
        log.error("payload in queue %r is not a job, moved to the dead set: %s", unit.queue, exc)
        self.finish(unit, None, None, invalid(unit.raw, unit.queue, error_class_name(exc), str(exc)))

    @staticmethod
    def alone(payload: dict[str, Any], recovered: int) -> None:
        """A suspect about to run alone (see `isolation`)."""
        log.warning("%s %s: processes died %d times while running it; running it alone",
                    display_name(payload), payload.get("jid"), recovered)

    def wait_turn(self, unit: UnitOfWork) -> None:
        """Another job runs alone now (see `isolation`): this one goes back to its queue,
        unchanged, through any outage, and is fetched again once the gate opens."""
        self.settle(lambda: unit.put_back([0]))

    def admit(self, payload: dict[str, Any]) -> type[Any] | None:
        """The job's class when it may start; None when it may not (see `refuse`)."""
        if "expires_at" in payload and overdue(payload, self.rt.retrier.clock()) is not None:  # most: no clock
            return None
        try:
            return self.rt.registry.get(job_name(payload))
        except UnknownJobError:
            return None

    def refuse(self, unit: UnitOfWork, payload: dict[str, Any]) -> None:
        """File the fate of a job `admit` refused: past its deadline (`expires_in`, Sidekiq Pro's
        `expires_at`), dropped unstarted; a job this worker does not run, retried."""
        late = overdue(payload, self.rt.retrier.clock()) if "expires_at" in payload else None
        if late is not None:
            log.info("%s %s expired %.1f s ago (expires_in=%s): dropped without running", display_name(payload),
                     payload.get("jid"), late, payload.get("expires_in"))
            self.finish(unit, payload, None, Outcome("dropped", payload=payload, reason=EXPIRED))
            return
        try:
            self.rt.registry.get(job_name(payload))
        except UnknownJobError as exc:
            self._unknown(unit, payload, exc)
            return
        self.run(unit, payload)  # registered meanwhile: it may run after all

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
        log.warning("%s %s: %s; %s", display_name(payload), payload.get("jid"), exc, self.rt.retrier.fate(outcome))
        self.finish(unit, outcome.payload or payload, None, dataclasses.replace(outcome, logged=True))

    def take(self, unit: UnitOfWork, payload: dict[str, Any], ops: list[Any]) -> bool:
        """Write the features' `taken` operations `ops`; False when the job is not to run here
        (see `skip`)."""
        taken = self.settle(lambda: unit.taken(ops))
        if not taken:
            self.skip(unit, payload, taken)
        return bool(taken)

    @staticmethod
    def skip(unit: UnitOfWork, payload: dict[str, Any], taken: bool | None) -> None:
        """A job not run because its `taken` operations were not written: False, it is no longer
        ours; None, Redis stayed down past the hard deadline (shutdown puts it back)."""
        if taken is False:
            log.warning("%s %s was recovered by another process before it started here; skipped",
                        display_name(payload), payload.get("jid"))
            unit.done = True

    def enter(self, unit: UnitOfWork, payload: dict[str, Any]) -> contextvars.Token[Any]:
        """Enter the job's log context (see `job_context`); reset it with the token returned."""
        token = job_context.set((job_name(payload), str(payload.get("jid", "")), unit.queue,
                                 trace_id(payload) if "traceparent" in payload else None, payload))
        log.info("start")
        return token

    def job(self, job_class: type[Any], payload: dict[str, Any]) -> Any:
        """A fresh instance of the job, told its jid and payload."""
        job = job_class()
        job.jid, job.payload = str(payload.get("jid", "")), payload
        return job

    # -- the outcome -----------------------------------------------------------------------------
    def done(self, started: float, result: Any) -> Outcome:
        elapsed = time.monotonic() - started
        log.info("done: %.3f sec", elapsed)
        return Outcome.done(elapsed, result)

    def failed(self, unit: UnitOfWork, payload: dict[str, Any], job: Any, exc: BaseException,
               started: float) -> Outcome:
        """The outcome of a run that raised `exc` (logged here, in the job's log context)."""
        if isinstance(exc, Suspended):  # a durable sleep or wait: parked until its time, nothing spent
            return dataclasses.replace(self._park(unit, exc), elapsed=time.monotonic() - started)
        if isinstance(exc, (OverLimit, Cancelled)):  # the job stopped itself: not a failure, no retry spent
            return dataclasses.replace(self._control(unit, payload, exc), elapsed=time.monotonic() - started)
        if isinstance(exc, Retry):  # the job asked to run again: a failure only once no retry is left
            return dataclasses.replace(self._requested(job, unit, exc), elapsed=time.monotonic() - started)
        self.rt.counters.failed.incr()
        elapsed = time.monotonic() - started
        log.warning("fail: %.3f sec: %s: %s", elapsed, error_class_name(exc), exc, exc_info=exc)
        return dataclasses.replace(self._decide(job, unit, exc), elapsed=elapsed)

    def _decide(self, job: Any, unit: UnitOfWork, exc: BaseException) -> Outcome:
        """The retrier's outcome for the payload as fetched (not what middleware changed)."""
        try:
            return self.rt.retrier.decide(job, decode(unit.raw), unit.raw, unit.queue, exc)
        except Exception as bug:  # a fault outside the job's code must not decide its fate twice
            log.exception("could not decide the outcome of a failed job; filing it in the dead set")
            return invalid(unit.raw, unit.queue, error_class_name(bug), f"{error_class_name(exc)}: {exc}")

    def _requested(self, job: Any, unit: UnitOfWork, exc: Retry) -> Outcome:
        """The retrier's outcome of a `Retry`, logged in one line without a traceback."""
        outcome = self._decide(job, unit, exc)
        if outcome.requested:
            log.info("retry requested, again in %g s", exc.seconds)
        else:
            self.rt.counters.failed.incr()
            log.warning("retry requested, but no retry is left (%d allowed): %s",
                        self.rt.retrier.max_attempts(outcome.payload or {}), self.rt.retrier.fate(outcome))
        return dataclasses.replace(outcome, logged=True)

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

    def _park(self, unit: UnitOfWork, signal: Suspended) -> Outcome:
        """A durable sleep or wait: the job to `schedule` until its time (`Retrier.suspend`)."""
        try:
            outcome = self.rt.retrier.suspend(decode(unit.raw), unit.raw, unit.queue, signal)
        except Exception as bug:  # a fault outside the job's code must not decide its fate twice
            log.exception("could not park a job; filing it in the dead set")
            return invalid(unit.raw, unit.queue, error_class_name(bug), f"{error_class_name(signal)}: {signal}")
        log.info("%s; parked for %.1f s", signal, signal.until - self.rt.retrier.clock())
        return outcome

    # -- applying it -----------------------------------------------------------------------------
    def finish(self, unit: UnitOfWork, payload: dict[str, Any] | None, job: Any, outcome: Outcome) -> None:
        """Apply `outcome` in one atomic call, then run the features' observers and the hooks."""
        if unit.done:  # put back by a hard shutdown while it ran
            return
        self.rt.counters.processed.incr()
        point = POINT_OF[outcome.kind]
        ops = self.rt.lifecycle.ops(point, payload, outcome)
        applied = self.settle(lambda: unit.apply(outcome, ops))
        if applied:
            self.rt.lifecycle.observe(point, payload, outcome)
            self.rt.retrier.after(outcome, job, payload, unit.queue)
        elif applied is False:
            log.warning("the %s outcome of %s was not written: this processor no longer held the job "
                        "(another process recovered it, and its copy is the live one)",
                        outcome.kind, (payload or {}).get("jid", "a job"))

    def fault(self, unit: UnitOfWork, exc: BaseException) -> None:
        """A fault outside the job's code while it was held: the job goes to the dead set, its
        bytes kept, rather than run into the fault again (one call: the caller logs a failure)."""
        if unit.done:
            return
        try:
            payload: dict[str, Any] | None = decode(unit.raw)
        except PayloadError:
            payload = None
        outcome = invalid(unit.raw, unit.queue, error_class_name(exc),
                          f"sidequest failed while processing this job (not the job's own code): {exc}")
        unit.apply(outcome, self.rt.lifecycle.ops("dead", payload, outcome))

    def settle(self, action: Callable[[], T]) -> T | None:
        """Run a Redis action that ends a job's stay here, through any Redis outage.

        It gives up (None) only when the runner's hard deadline has passed; under reliable fetch
        the job then stays reserved and is recovered, so it runs again rather than being lost.
        """
        try:
            return action()  # most calls: no back-off to keep
        except REDIS_ERRORS as exc:
            self.rt.outage.down(exc)
        backoff = Backoff()
        while True:
            if self.hard_stop.wait(backoff.failed()):
                log.error("gave up finishing a job while Redis was unavailable; it stays reserved")
                return None
            try:
                return action()
            except REDIS_ERRORS as exc:
                self.rt.outage.down(exc)
