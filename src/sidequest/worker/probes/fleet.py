"""A supervisor's probes (`sidequest worker --processes N`): one answer for its whole fleet.

Live while its own loop runs (it records a verdict each tick; a stuck supervisor's goes stale) and
every running child is live, as the child's liveness file says (`state.judge`); a child started
less than `STARTING` seconds ago that has written none yet is starting, not dead (importing the
application can take a while). Ready while Redis answers and takes writes, and every running child
is registered and working. The verdict is written to the supervisor's own liveness file, so
`sidequest health --live --pidfile <the supervisor's>` reads the fleet's answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from sidequest.config import Config
from sidequest.worker.probes.readiness import Health, Readiness
from sidequest.worker.probes.state import LiveReport, folder, judge, read
from sidequest.worker.probes.watchdog import tick_of

STARTING = 60.0  # seconds a new child may take before its first liveness file


class FleetWatch:
    def __init__(self, config: Config, children: Callable[[], list[tuple[int, float]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.children = children  # (pid, seconds it has run) of each running child
        self.clock = clock
        self.tick = tick_of(config)
        self.report = LiveReport(config, f"supervisor {os.getpid()}", stale_after=config.liveness_timeout + self.tick)
        self._next = -float("inf")
        self.ready = Readiness(config, also=self._unready)  # `GET /ready` of the supervisor

    def judge(self) -> None:
        """Record the fleet's verdict, once a tick (the supervisor's loop calls it more often)."""
        now = self.clock()
        if now < self._next:
            return
        self._next = now + self.tick
        pids = self._judged()
        if not pids:
            self.report.record(Health(True, f"{self.report.identity}: worker processes starting"), False)
            return
        verdict = judge(self.config, pids)
        if verdict.ok:
            verdict = Health(True, f"{self.report.identity}: {verdict.reason}")
        working = verdict.ok and len(pids) == len(self.children()) and judge(self.config, pids, ready=True).ok
        self.report.record(verdict, working)

    def _judged(self) -> list[int]:
        """The running children that have written a liveness file, or should have by now."""
        where = folder(self.config)
        return [pid for pid, age in self.children() if age >= STARTING or read(where, pid) is not None]

    def _unready(self) -> str | None:
        """What the supervisor's `GET /ready` adds to Redis answering and taking writes."""
        return None if self.report.ready() else f"{self.report.identity}: not every worker process is live and working"

    def stop(self) -> None:
        self.report.remove()
        self.ready.close()
