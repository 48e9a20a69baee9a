"""The pool of processors: start them, replace any that dies, quiet them, stop by a deadline.

Shutdown is staged, as in Sidekiq: quiet (no processor fetches again) -> wait until the
deadline for running jobs to finish (`hurry()` ends the wait at once: a second TERM) -> put
every job still running back at the head of its queue, unchanged -> return, so the process can
exit. It is worse to lose a job than to run it twice: a job put back here may run again while
this process exits (at-least-once). Python cannot safely kill a thread, so the threads are
abandoned (they are daemons), not killed.

A processor that dies (a fault outside any job's code) is replaced after a back-off that
doubles while deaths follow each other (0.5 s up to 30 s), so a fault can never spin; the job
it held is filed in `dead` with the fault, its bytes kept, rather than run into it again.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sidequest.errors import PayloadError
from sidequest.jobs.payload import decode
from sidequest.worker.fetch.fetchers import Fetch, UnitOfWork
from sidequest.worker.outcome import error_class_name, invalid
from sidequest.worker.processor import Processor, Runtime

log = logging.getLogger(__name__)

RESPAWN_START, RESPAWN_MAX, RESPAWN_CALM = 0.5, 30.0, 60.0


class Manager:
    """One capsule's processors (the process's default one unless `concurrency` is given).
    Processor numbers come from `numbers`, shared by a process's managers, so each processor
    of the process has a number (and a reserved list) no other has."""

    def __init__(self, runtime: Runtime, make_fetch: Callable[[int], Fetch], concurrency: int | None = None,
                 numbers: Iterator[int] | None = None) -> None:
        self.rt = runtime
        self.make_fetch = make_fetch
        self.concurrency = runtime.config.concurrency if concurrency is None else concurrency
        self._numbers = numbers if numbers is not None else itertools.count()
        self._started: list[int] = []
        self.quieting = threading.Event()
        self.hard_stop = threading.Event()
        self._hurry = threading.Event()
        self._processors: set[Processor] = set()
        self._changed = threading.Condition()
        self._respawn_delay = 0.0
        self._last_death = 0.0

    def start(self) -> None:
        for _ in range(self.concurrency):
            self._spawn()

    def _spawn(self, delay: float = 0.0) -> None:
        with self._changed:
            index = next(self._numbers)
            self._started.append(index)
            processor = Processor(self.rt, self.make_fetch(index), self, index, start_delay=delay)
            self._processors.add(processor)
        processor.start()

    @property
    def busy(self) -> int:
        return len(self.rt.counters.work)

    def alive(self) -> int:
        with self._changed:
            return len(self._processors)

    def slots(self) -> tuple[list[int], set[int]]:
        """The slots of every processor ever started, and of those still running."""
        with self._changed:
            return list(self._started), {p.index for p in self._processors}

    # -- processor callbacks (on the processor's thread) ---------------------------------------
    def processor_stopped(self, processor: Processor) -> None:
        with self._changed:
            self._processors.discard(processor)
            self._changed.notify_all()

    def processor_died(self, processor: Processor, exc: BaseException) -> None:
        now = time.monotonic()
        with self._changed:
            calm = now - self._last_death > RESPAWN_CALM
            self._respawn_delay = RESPAWN_START if calm else min(self._respawn_delay * 2, RESPAWN_MAX)
            self._last_death = now
            delay = self._respawn_delay
        log.error("processor %d died (%s: %s); replacing it in %.1f s", processor.index,
                  type(exc).__name__, exc, delay, exc_info=exc)
        unit = processor.unit
        try:
            processor.fetch.flush()  # a success it already finished: its replacement has another list
            if unit is not None and not unit.done:
                outcome = invalid(unit.raw, unit.queue, error_class_name(exc),
                                  f"sidequest failed while processing this job (not the job's own code): {exc}")
                unit.apply(outcome, self.rt.lifecycle.ops("dead", _decoded(unit.raw), outcome))
        except Exception as apply_exc:
            log.error("could not settle the jobs of a dead processor (%s); they stay reserved", apply_exc)
        with self._changed:
            self._processors.discard(processor)
            self._changed.notify_all()
        if not self.quieting.is_set():
            self._spawn(delay)

    # -- lifecycle (main thread) ---------------------------------------------------------------
    def quiet(self) -> None:
        if not self.quieting.is_set():
            log.info("quieting: no new jobs will be fetched")
            self.quieting.set()

    def hurry(self) -> None:
        """End the wait for running jobs now: they are put back (a second TERM/INT)."""
        self._hurry.set()
        with self._changed:
            self._changed.notify_all()

    def stop(self, deadline: float) -> list[UnitOfWork]:
        """Quiet, wait until `deadline` (monotonic) for running jobs, then put back what remains."""
        self.quiet()
        with self._changed:
            if self._processors:
                log.info("waiting up to %.1f s for %d running job(s)", max(deadline - time.monotonic(), 0), self.busy)
            while self._processors and not self._hurry.is_set():
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
            log.warning("putting %d unfinished job(s) back on their queues", len(leftovers))
            for unit in leftovers:
                put_back(self.rt, unit)
        return leftovers


def put_back(runtime: Runtime, unit: UnitOfWork) -> None:
    """Put a job still running at the shutdown deadline back at the head of its queue, unchanged."""
    try:
        payload = decode(unit.raw)
    except PayloadError:
        payload = None
    try:
        unit.put_back(runtime.lifecycle.ops("put_back", payload))
    except Exception as exc:  # Redis down: reliable fetch keeps it reserved for recovery
        log.error("could not put a job back (%s); it stays reserved and will be recovered", exc)


def _decoded(raw: bytes) -> dict[str, Any] | None:
    """The payload for the features' operations, or None when the bytes are not a job."""
    try:
        return decode(raw)
    except PayloadError:
        return None
