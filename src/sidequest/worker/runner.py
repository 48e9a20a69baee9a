"""What the launcher asks of a runner, and the staged shutdown every runner shares.

A runner runs the jobs of one capsule (its queues): `thread_runner.ThreadRunner` on processor
threads, `asyncio_runner.AsyncioRunner` as coroutines on the process's event loop. The launcher
composes runners through `Runner` alone.

Shutdown is staged, as in Sidekiq, and written once (`StagedShutdown.stop`): quiet (nothing
new is fetched) -> wait until the deadline for running jobs to finish (`hurry()` ends the wait
at once: a second TERM) -> hard stop (a call stuck in an outage gives up; the runner's fetches
end, so none takes a job about to be put back) -> put every job still running back at the head
of its queue, unchanged -> return, so the process can exit. It is worse to lose a job than to
run it twice: a job put back here may run again while this process exits (at-least-once).
Python cannot safely kill a thread, so a thread still in a job's code is abandoned (it is a
daemon), not killed; a coroutine on the loop is cancelled once its job is back in its queue.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Protocol

from sidequest.errors import PayloadError
from sidequest.jobs.payload import decode
from sidequest.store.direct import DirectPath
from sidequest.store.reasons import reason
from sidequest.worker.fetch.unit import UnitOfWork
from sidequest.worker.lifecycle import Lifecycle

log = logging.getLogger(__name__)


class Runner(Protocol):
    """Runs one capsule's jobs: started, quieted and stopped by the launcher."""

    def start(self) -> None:
        """Start fetching and running jobs (returns at once)."""
        ...

    def quiet(self) -> None:
        """Fetch nothing more; running jobs finish."""
        ...

    def hurry(self) -> None:
        """End a stop's wait for running jobs now (they are put back)."""
        ...

    def stop(self, deadline: float) -> list[UnitOfWork]:
        """The staged shutdown by `deadline` (monotonic); the jobs put back (or left reserved)."""
        ...

    @property
    def busy(self) -> int:
        """Jobs running now."""
        ...

    def alive(self) -> int:
        """Processor threads (or the loop's fetch) still running."""
        ...

    def slots(self) -> tuple[list[int], set[int]]:
        """The processor slots ever started, and those still running (each names a reserved list)."""
        ...

    def queues(self) -> list[str]:
        """The queues it works."""
        ...

    def batch_of(self, queue: str) -> str:
        """The batch list holding its jobs of `queue`."""
        ...

    def close(self, lane: DirectPath) -> None:
        """After `stop`: send the successes not acknowledged yet, on `lane`."""
        ...


class StagedShutdown(ABC):
    """The staged shutdown (see the module), for a runner that says what it still runs (`busy`,
    `_waits_for`, `_unfinished`) and how its fetches end (`_end_fetches`). The runner calls
    `_changed.notify_all()` (holding it) when what it runs changes."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._features = lifecycle  # their `put_back` operations
        self.quieting = threading.Event()
        self.hard_stop = threading.Event()
        self._hurry = threading.Event()
        self._changed = threading.Condition()

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
            if self._waits_for():
                log.info("waiting up to %.1f s for %d running job(s)", max(deadline - time.monotonic(), 0), self.busy)
            while self._waits_for() and not self._hurry.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            leftovers = self._unfinished()
        self.hard_stop.set()
        self._end_fetches()
        if leftovers:
            log.warning("putting %d unfinished job(s) back on their queues", len(leftovers))
            for unit in leftovers:
                put_back(self._features, unit)
        return leftovers

    # -- what a runner says ----------------------------------------------------------------------
    @property
    @abstractmethod
    def busy(self) -> int: ...

    @abstractmethod
    def _waits_for(self) -> bool:
        """Something still runs that the stop waits for (called holding `_changed`)."""

    @abstractmethod
    def _unfinished(self) -> list[UnitOfWork]:
        """The jobs still running at the deadline (called holding `_changed`)."""

    @abstractmethod
    def _end_fetches(self) -> None:
        """Wait (bounded) until no fetch of this runner can take a job any more."""


def put_back(lifecycle: Lifecycle, unit: UnitOfWork) -> None:
    """Put a job still running at the shutdown deadline back at the head of its queue, unchanged."""
    try:
        payload = decode(unit.raw)
    except PayloadError:
        payload = None
    try:
        unit.put_back(lifecycle.ops("put_back", payload))
    except Exception as exc:  # Redis down: reliable fetch keeps it reserved for recovery
        log.error("could not put a job back (%s); it stays reserved and will be recovered", reason(exc))
