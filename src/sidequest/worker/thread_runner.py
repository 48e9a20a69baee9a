"""The threads runner: one capsule's processor threads, started, replaced, quieted, stopped.

Each processor (`processor`) fetches through its capsule's batch (`fetch.batch.BatchList`) and runs
one job at a time with the job-run step (`job_run`). Shutdown is the staged one every runner
shares (`runner.StagedShutdown`): the wait is for the processors to end (an idle one ends after
its blocking fetch), and the processors still running a job at the deadline are abandoned (they
are daemons) once their jobs are back in their queues.

A processor that dies (a fault outside any job's code) is replaced after a back-off that
doubles while deaths follow each other (0.5 s up to 30 s), so a fault can never spin; the job
it held is filed in `dead` with the fault, its bytes kept, rather than run into it again.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator

from sidequest.store.direct import DirectPath
from sidequest.worker.fetch.batch import BatchList
from sidequest.worker.fetch.fetchers import Fetch, UnitOfWork
from sidequest.worker.job_run import Runtime
from sidequest.worker.processor import Processor
from sidequest.worker.runner import StagedShutdown

log = logging.getLogger(__name__)

RESPAWN_START, RESPAWN_MAX, RESPAWN_CALM = 0.5, 30.0, 60.0


class ThreadRunner(StagedShutdown):
    """One capsule's processors (the process's default one unless `concurrency` is given).
    Processor numbers come from `numbers`, shared by a process's runners, so each processor
    of the process has a number (and a reserved list) no other has."""

    def __init__(self, runtime: Runtime, hub: BatchList, make_fetch: Callable[[int], Fetch],
                 concurrency: int | None = None, numbers: Iterator[int] | None = None) -> None:
        super().__init__(runtime.lifecycle)
        self.rt = runtime
        self.hub = hub  # the capsule's batches and acknowledger, which its processors' fetches share
        self.make_fetch = make_fetch
        self.concurrency = runtime.config.concurrency if concurrency is None else concurrency
        self._numbers = numbers if numbers is not None else itertools.count()
        self._started: list[int] = []
        self._processors: set[Processor] = set()
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

    def queues(self) -> list[str]:
        return self.hub.queues()

    def batch_of(self, queue: str) -> str:
        return self.hub.batch_of(queue)

    def close(self, lane: DirectPath) -> None:
        self.hub.close(lane)

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
        try:
            processor.fetch.flush()  # a success it already finished: its replacement has another list
            if processor.unit is not None:
                processor.step.fault(processor.unit, exc)
        except Exception as apply_exc:
            log.error("could not settle the jobs of a dead processor (%s); they stay reserved", apply_exc)
        self.processor_stopped(processor)
        if not self.quieting.is_set():
            self._spawn(delay)

    # -- the staged shutdown's questions (see `runner`) -----------------------------------------
    def _waits_for(self) -> bool:
        return bool(self._processors)

    def _unfinished(self) -> list[UnitOfWork]:
        return [p.unit for p in self._processors if p.unit is not None and not p.unit.done]

    def _end_fetches(self) -> None:
        """Idle processors may still be inside a blocking fetch (quiet stops only the next one):
        let those fetches end, so none of them takes a job about to be put back."""
        with self._changed:
            end = time.monotonic() + self.rt.config.fetch_timeout + 1.0
            while any(p.unit is None or p.unit.done for p in self._processors) and time.monotonic() < end:
                self._changed.wait(end - time.monotonic())
