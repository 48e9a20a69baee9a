"""One worker thread: fetch -> decode -> resolve -> server middleware -> run -> acknowledge.

The loop checks its manager's quiet flag between jobs; every fetch is bounded, so a stop is
noticed within `fetch_timeout`. Errors from a job are the retrier's business; errors from
Redis are logged once per outage and retried with back-off, so a dropped connection neither
spins nor loses the job in hand. Anything else that escapes kills only this thread: the
manager logs it and starts a replacement.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from .config import Config
from .errors import PayloadError
from .executor import Executor
from .fetch import Fetch, UnitOfWork
from .payload import decode, encode, new_jid
from .registry import Registry
from .retry import Retrier, error_class_name
from .stats import Stats
from .tasks import TaskRecorder, running

if TYPE_CHECKING:
    from .manager import Manager

log = logging.getLogger(__name__)

# (job name, jid) of the job running on this thread, for log lines (see cli's log format).
job_context: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("sidequest_job", default=None)

BACKOFF_START, BACKOFF_MAX = 0.5, 5.0


@dataclass
class Runtime:
    """What every processor of one worker process shares."""

    config: Config
    registry: Registry
    stats: Stats
    retrier: Retrier
    executor: Executor
    identity: str
    tasks: TaskRecorder | None = None
    outage: RedisOutage = field(default_factory=lambda: RedisOutage())


class RedisOutage:
    """Logs a lost Redis connection once, and its return once, however many threads notice."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._lock = threading.Lock()

    def down(self, exc: BaseException) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                log.error("Redis is unreachable (%s); retrying until it is back", exc)

    def up(self) -> None:
        if self._since is None:
            return
        with self._lock:
            if self._since is not None:
                log.info("Redis is back after %.1f s", time.monotonic() - self._since)
                self._since = None


class Processor:
    def __init__(self, runtime: Runtime, fetch: Fetch, manager: Manager, index: int) -> None:
        self.rt = runtime
        self.fetch = fetch
        self.manager = manager
        self.index = index
        self.unit: UnitOfWork | None = None  # the job in hand, for hard shutdown
        self.thread = threading.Thread(target=self.run, name=f"sidequest-processor-{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    @property
    def tid(self) -> str:
        return format(self.thread.ident or 0, "x")

    def run(self) -> None:
        try:
            while not self.manager.quieting.is_set():
                unit = self._fetch()
                if unit is None:
                    continue
                if self.manager.quieting.is_set():
                    self._settle(unit.requeue)
                    if unit.task_marked:  # the fetch marked it working; it is waiting again
                        self.manager.record_requeue(unit, "requeued: its worker is stopping")
                    break
                self.process(unit)
            self._settle(self.fetch.flush)
        except BaseException as exc:  # thread boundary: report and let the manager replace us
            self.manager.processor_died(self, exc)
        else:
            self.manager.processor_stopped(self)

    def _fetch(self) -> UnitOfWork | None:
        try:
            unit = self.fetch.retrieve_work()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self.rt.outage.down(exc)
            self.manager.quieting.wait(BACKOFF_START)
            return None
        self.rt.outage.up()
        return unit

    def process(self, unit: UnitOfWork) -> None:
        self.unit = unit
        self.rt.stats.work.start(self.tid, unit.queue, unit.raw)
        try:
            try:
                payload = decode(unit.raw)
            except PayloadError as exc:
                self._bury(unit, exc)
            else:
                self._perform(unit, payload)
        finally:
            self.rt.stats.work.finish(self.tid)
            self.rt.stats.processed.incr()
        # Cleared only on a normal return: if anything escaped, the manager still sees the
        # unit in hand and puts it back when it replaces this processor.
        self.unit = None

    def _perform(self, unit: UnitOfWork, payload: dict[str, Any]) -> None:
        name, jid = payload["class"], str(payload.get("jid", ""))
        token = job_context.set((name, jid))
        started = time.monotonic()
        log.info("start")
        job = None
        try:
            job_class = self.rt.registry.get(name)
            job = job_class()
            job.jid, job.payload = jid, payload
            args = payload["args"]
            limit = payload.get("timeout") or self.rt.config.job_timeout
            limit = float(limit) if isinstance(limit, (int, float)) and limit > 0 else None
            task = self._task_of(payload)
            with self._tracking(unit, task):
                self.rt.config.server_middleware.invoke(
                    job, payload, unit.queue, final=lambda: self.rt.executor.run(job, args, limit))
        except BaseException as exc:  # SystemExit from a job's sys.exit() is a job failure too
            self.rt.stats.failed.incr()
            log.warning("fail: %.3f sec: %s: %s", time.monotonic() - started, error_class_name(exc), exc)
            if unit.done:  # put back by a hard shutdown while it ran
                return
            pristine = decode(unit.raw)  # retry what was fetched, not what middleware changed
            commands = self.rt.retrier.failed(job, pristine, unit.queue, exc)
            self._settle(lambda: unit.acknowledge(also=commands))
        else:
            log.info("done: %.3f sec", time.monotonic() - started)
            self._settle(lambda: unit.acknowledge(task=task))
        finally:
            job_context.reset(token)

    def _task_of(self, payload: dict[str, Any]) -> tuple[str, str] | None:
        """(task id, jid) for a job that belongs to a task, else None."""
        task_id = payload.get("task_id")
        if not isinstance(task_id, str) or self.rt.tasks is None:
            return None
        return task_id, str(payload.get("jid", ""))

    def _tracking(self, unit: UnitOfWork, task: tuple[str, str] | None) -> AbstractContextManager[None]:
        """For a task job: mark it working (unless the fetch did) and open its message context."""
        if task is None or self.rt.tasks is None:
            return contextlib.nullcontext()
        if not unit.task_marked:
            self.rt.tasks.transition(*task, "working", "working", started_at=time.time())
        return running(self.rt.tasks, *task)

    def _bury(self, unit: UnitOfWork, exc: PayloadError) -> None:
        """A payload that is not a job goes to dead as it was, with the reason when it can hold one."""
        self.rt.stats.failed.incr()
        log.error("payload in queue %r is not a job, moved to the dead set: %s", unit.queue, exc)
        blob: str | bytes = unit.raw
        try:
            data = json.loads(unit.raw.decode("utf-8"))
        except ValueError:
            data = None  # not JSON at all: kept byte for byte (Sidekiq's API shows such entries raw)
        else:
            if not isinstance(data, dict):
                # JSON, but not an object: Sidekiq's DeadSet cannot read that, so wrap it; the
                # original text is kept exactly, as the only argument.
                data = {"class": "sidequest.InvalidPayload", "args": [unit.raw.decode("utf-8")],
                        "queue": unit.queue, "jid": new_jid(), "retry": False}
        if data is not None:
            data.update(error_class=error_class_name(exc), error_message=str(exc),
                        failed_at=time.time(), retry_count=0)
            data.setdefault("queue", unit.queue)
            blob = encode(data)
        self._settle(lambda: unit.acknowledge(also=self.rt.retrier.to_dead(blob)))

    def _settle(self, action: Any) -> None:
        """Run an acknowledgement or requeue, retrying through a Redis outage.

        It gives up only when the manager's hard deadline has passed; under reliable fetch the
        job then stays reserved and is recovered, so it runs again rather than being lost.
        """
        delay = BACKOFF_START
        while True:
            try:
                action()
                self.rt.outage.up()
                return
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                self.rt.outage.down(exc)
                if self.manager.hard_stop.wait(delay):
                    log.error("gave up finishing a job while Redis was unreachable; it stays reserved")
                    return
                delay = min(delay * 2, BACKOFF_MAX)

