"""A worker process's liveness, judged from inside and without Redis: its background threads
(heartbeat, poller, recovery) are running and not stuck, and its event loop (when it has one)
runs a callback within `liveness_timeout` seconds.

Every tick (a quarter of `liveness_timeout`, at most a second) the watchdog's own thread posts a
callback to the event loop unless the last one is still waiting, judges, and records the verdict
(`state.LiveReport`: the process's `GET /live` and its liveness file). A loop whose callback has
waited longer than `liveness_timeout` is blocked: an `async def` job calling `time.sleep`, or
CPU-bound code. A duty's thread that has ended is dead; one that has not woken `liveness_timeout`
after its wait ended is stuck, and so is a heartbeat whose pass has run `liveness_timeout` plus its
Redis calls' own timeouts (a beat on a Redis that hangs gives up by then). Another duty's pass may
make many calls to a Redis that hangs, each bounded, so only its end and a missed wake count: a
Redis outage must never make a worker not live (an outage is readiness's business; restarting
workers does not bring Redis back).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sidequest.config import Config
from sidequest.store.connection import CONNECT_TIMEOUT, SOCKET_TIMEOUT
from sidequest.worker.background.loop import Background
from sidequest.worker.probes.readiness import Health
from sidequest.worker.probes.state import LiveReport

# longest a heartbeat's pass may wait on a Redis that does not answer: its beat, and the beat a
# remote quiet sends at once
REDIS_BOUND = 2 * (SOCKET_TIMEOUT + CONNECT_TIMEOUT)
TIMED = frozenset({"heartbeat"})  # the duties whose pass is bounded by REDIS_BOUND


def tick_of(config: Config) -> float:
    """Seconds between two judgements."""
    return min(1.0, config.liveness_timeout / 4)


class Watchdog:
    def __init__(self, config: Config, report: LiveReport, duties: dict[str, Background],
                 loop: Callable[[], asyncio.AbstractEventLoop | None], ready: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic, redis_bound: float = REDIS_BOUND,
                 timed: frozenset[str] = TIMED) -> None:
        self.limit = config.liveness_timeout
        self.redis_bound = redis_bound
        self.timed = timed
        self.tick = tick_of(config)
        self.report = report
        self.duties = duties  # "heartbeat" -> its loop, ...
        self._loop = loop  # the process's event loop, if started
        self._ready = ready
        self.clock = clock
        self._asked: float | None = None  # when the callback still waiting was posted
        self._probed: asyncio.AbstractEventLoop | None = None
        self.background = Background("sidequest-watchdog", self._pass, what="liveness watchdog",
                                     retry=self.tick, outage=())

    def start(self) -> None:
        self._pass()  # a verdict from the start
        self.background.start(delay=self.tick)

    def stop(self) -> None:
        self.background.stop()
        self.report.remove()

    def _pass(self) -> float:
        self._ask_loop()
        self.report.record(self.check(), self._ready())
        return self.tick

    def _ask_loop(self) -> None:
        loop = self._loop()
        if loop is None or loop.is_closed():
            self._asked = self._probed = None
            return
        if self._asked is None or loop is not self._probed:
            self._asked, self._probed = self.clock(), loop
            try:
                loop.call_soon_threadsafe(self._answered, loop)
            except RuntimeError:  # closed meanwhile: the process is stopping
                self._asked = self._probed = None

    def _answered(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is self._probed:
            self._asked = None

    def check(self) -> Health:
        """Whether this process is live now, and why not."""
        now = self.clock()
        for name, duty in self.duties.items():
            if duty.stopping.is_set():  # stopped on purpose: the process is stopping
                continue
            if not duty.running:
                return Health(False, f"{self.report.identity}: the {name} thread has stopped")
            began = duty.pass_began
            if began is None:
                late = now - duty.wakes_by
            elif name in self.timed:
                late = now - began - self.redis_bound
            else:  # its pass may wait on a Redis that hangs, call after call: not judged
                continue
            if late > self.limit:
                return Health(False, f"{self.report.identity}: the {name} thread is stuck "
                                     f"({late:.1f} s late; liveness_timeout {self.limit:g} s)")
        asked = self._asked
        if asked is not None and now - asked > self.limit:
            return Health(False, f"{self.report.identity}: the event loop is blocked: a callback has waited "
                                 f"{now - asked:.1f} s (liveness_timeout {self.limit:g} s)")
        return Health(True, f"{self.report.identity}: its threads and event loop answer")
