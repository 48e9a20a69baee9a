"""A process's background duties: the poller, orphan recovery, the periodic scheduler, limiter leases.

Each is one step run again and again on a named daemon thread until stopped; the step returns how
long to wait before the next. The loop is written once, here, with its failure rules: a step that
meets a Redis outage waits `retry` seconds and tries again (logged once per outage when `loud`,
else at debug level: the processors' outage line is the process's one line); any other error is
logged with its traceback and the loop goes on, for a duty must not die of one bad pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sidequest.store.connection import OUTAGE_ERRORS
from sidequest.store.reasons import reason

log = logging.getLogger(__name__)


class Background:
    def __init__(self, name: str, step: Callable[[], float], *, what: str, retry: float | Callable[[], float],
                 outage: tuple[type[BaseException], ...] = OUTAGE_ERRORS, loud: bool = False,
                 on_outage: Callable[[], None] | None = None) -> None:
        self.name = name
        self.step = step
        self.what = what  # for the log lines: "orphan recovery", "poller"...
        self.retry = retry
        self.outage = outage
        self.loud = loud
        self.on_outage = on_outage
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        # for the liveness watchdog (`probes.watchdog`): when the running pass began (None while
        # waiting) and when the wait ends, monotonic; two float writes a pass, read without a lock
        self.pass_began: float | None = None
        self.wakes_by = float("inf")

    def start(self, delay: float = 0.0) -> None:
        """Run the step on a new thread (again after a fork: the child has no thread), first after `delay`."""
        self.stopping.clear()
        self._thread = threading.Thread(target=self._loop, args=(delay,), name=self.name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        """Run the next step now rather than after the wait."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self, delay: float) -> None:
        if delay:
            self.wakes_by = time.monotonic() + delay
            self._wake.wait(delay)
        while not self.stopping.is_set():
            self._wake.clear()
            self.pass_began = time.monotonic()
            wait = self._pass()
            self.wakes_by = time.monotonic() + wait  # before the pass is over: a reader never sees a stale wake
            self.pass_began = None
            self._wake.wait(wait)

    def _pass(self) -> float:
        try:
            wait = self.step()
        except self.outage as exc:
            self._failed(exc)
        except Exception:  # thread boundary: keep the duty going
            log.exception("%s failed", self.what)
        else:
            self._failing = False
            return wait
        return self.retry() if callable(self.retry) else self.retry

    def _failed(self, exc: BaseException) -> None:
        if self.on_outage is not None:
            self.on_outage()
        if self.loud and not self._failing:
            retry = self.retry() if callable(self.retry) else self.retry
            log.warning("%s failed (%s); trying again every %g s", self.what, reason(exc), retry)
        elif not self.loud:
            log.debug("%s: Redis unavailable: %s", self.what, reason(exc))
        self._failing = True
