"""The pool of processors: start them, replace any that dies, quiet them, stop by a deadline.

Shutdown is staged, as in Sidekiq: quiet (no processor fetches again) -> wait until the
deadline for running jobs to finish -> put every job still running back at the head of its
queue, unchanged -> return, so the process can exit. It is worse to lose a job than to run it
twice: a job put back here may run again while this process exits (at-least-once). Python
cannot safely kill a thread, so the threads are abandoned (they are daemons), not killed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .errors import PayloadError
from .fetch import Fetch, UnitOfWork
from .payload import decode
from .processor import Processor, Runtime

log = logging.getLogger(__name__)


class Manager:
    def __init__(self, runtime: Runtime, make_fetch: Callable[[int], Fetch]) -> None:
        self.rt = runtime
        self.make_fetch = make_fetch
        self.quieting = threading.Event()
        self.hard_stop = threading.Event()
        self._processors: set[Processor] = set()
        self._changed = threading.Condition()
        self._next_index = 0

    def start(self) -> None:
        for _ in range(self.rt.config.concurrency):
            self._spawn()

    def _spawn(self) -> None:
        with self._changed:
            index = self._next_index
            self._next_index += 1
            processor = Processor(self.rt, self.make_fetch(index), self, index)
            self._processors.add(processor)
        processor.start()

    @property
    def busy(self) -> int:
        return len(self.rt.stats.work)

    def alive(self) -> int:
        with self._changed:
            return len(self._processors)

    # -- processor callbacks (on the processor's thread) ---------------------------------------
    def processor_stopped(self, processor: Processor) -> None:
        with self._changed:
            self._processors.discard(processor)
            self._changed.notify_all()

    def processor_died(self, processor: Processor, exc: BaseException) -> None:
        log.error("processor %d died: %s: %s", processor.index, type(exc).__name__, exc, exc_info=exc)
        unit = processor.unit
        if unit is not None and not unit.done:
            try:
                unit.requeue()  # the job it held goes back, unchanged
            except Exception as requeue_exc:
                log.error("could not requeue the job of a dead processor (%s); it stays reserved", requeue_exc)
        with self._changed:
            self._processors.discard(processor)
            self._changed.notify_all()
        if not self.quieting.is_set():
            self._spawn()

    # -- lifecycle (main thread) ---------------------------------------------------------------
    def quiet(self) -> None:
        if not self.quieting.is_set():
            log.info("quieting: no new jobs will be fetched")
            self.quieting.set()

    def record_requeue(self, unit: UnitOfWork, message: str) -> None:
        """A task job put back on its queue: its event says why and shows it enqueued again."""
        if self.rt.tasks is None or b"task_id" not in unit.raw:
            return
        try:
            payload = decode(unit.raw)
        except PayloadError:
            return
        self.rt.tasks.transition(payload, None, "enqueued", message)

    def stop(self, deadline: float) -> list[UnitOfWork]:
        """Quiet, wait until `deadline` (monotonic) for running jobs, then requeue what remains."""
        self.quiet()
        with self._changed:
            if self._processors:
                log.info("waiting up to %.1f s for %d running job(s)", max(deadline - time.monotonic(), 0), self.busy)
            while self._processors:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            busy = {p for p in self._processors if p.unit is not None and not p.unit.done}
        leftovers = [p.unit for p in busy if p.unit is not None]
        self.hard_stop.set()
        # Idle processors may still be inside a blocking fetch (quiet stops only the next one).
        # Let those fetches end first, so none of them takes a job we are about to put back.
        with self._changed:
            end = time.monotonic() + self.rt.config.fetch_timeout + 1.0
            while self._processors - busy and time.monotonic() < end:
                self._changed.wait(end - time.monotonic())
        if leftovers:
            log.warning("deadline reached: putting %d unfinished job(s) back on their queues", len(leftovers))
            for unit in leftovers:
                try:
                    if unit.requeue():
                        self.record_requeue(unit, "error: interrupted by shutdown; requeued")
                except Exception as exc:  # Redis down: reliable fetch keeps it reserved for recovery
                    log.error("could not requeue a job (%s); it stays reserved and will be recovered", exc)
        return leftovers
