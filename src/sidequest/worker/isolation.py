"""Poison-pill isolation: a suspect job runs alone in its process.

A job whose process died while running it gets `recovery_count` (set by recovery). Once is
ordinary: a deploy's `kill -9`, an OOM kill of a busy process, a lost machine; the jobs recovered
then run like any others, all at once, so recovery costs one heartbeat TTL and not one job time
per job. A job that was in flight at a second crash (`recovery_count` >= SUSPECT_AFTER) may be
what kills its process. If it ran next to other jobs and killed the process again, they would be
recovered with it, counted with it, and could reach the recovery limit with it. So a suspect runs
only when nothing else runs in its process: processors pass the gate before each fetch; a
processor holding a suspect closes the gate (no more fetches), waits until every other processor
has finished its job and settled it, and runs the job alone. If it kills the process, it is the
only job the process held, so only it is counted again; a neighbour can be in flight beside a
pill only while both are below the threshold, so it never passes `max_recoveries` with it. (With
`max_recoveries` 1, a job recovered once is at its last chance, so it runs alone already.)

At most one processor isolates at a time; another that fetches a suspect meanwhile puts it back
and waits at the gate (the job is fetched again once the gate opens).

The asyncio runner (`asyncio_runner`) passes the same gate as one more processor: its event loop
enters before it fetches, takes nothing while another isolates and leaves once it holds
nothing; its suspect closes the gate (`claim`), waits until the loop runs nothing else and no
thread is past the gate (`alone`), and runs alone. Capsules on threads and the loop of one
process so never run a suspect beside each other's jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

SUSPECT_AFTER = 2  # recoveries after which a job runs alone


def suspect(payload: dict[str, Any], max_recoveries: int) -> int | None:
    """The job's recoveries if it must run alone (see module), else None: in flight at
    SUSPECT_AFTER crashes, or at its last chance before `max_recoveries`."""
    recovered = payload.get("recovery_count")
    if not isinstance(recovered, int) or isinstance(recovered, bool):
        return None
    return recovered if recovered >= max(1, min(SUSPECT_AFTER, max_recoveries)) else None


class Isolation:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0  # processors past the gate (fetching or holding a job)
        self._owner: int | None = None  # the processor that isolates, while it does

    def try_enter(self) -> bool:
        """Pass the gate if it is open (never waits: the event loop's way)."""
        with self._cond:
            if self._owner is None:
                self._active += 1
                return True
            return False

    def enter(self, before_waiting: Callable[[], None], timeout: float) -> bool:
        """Pass the gate before a fetch. When it is closed, call `before_waiting` (settle what
        the caller still holds) and wait up to `timeout`; False if it stayed closed."""
        with self._cond:
            if self._owner is None:
                self._active += 1
                return True
        before_waiting()
        with self._cond:
            if not self._cond.wait_for(lambda: self._owner is None, timeout):
                return False
            self._active += 1
            return True

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._owner is not None:  # only an isolating processor waits on this count
                self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._owner is not None

    def isolate(self, who: int, give_up: Callable[[], bool], poll: float = 0.2) -> bool:
        """Close the gate and wait until `who` is the only processor past it. False (gate left
        as it was) if another processor isolates already, or `give_up()` turns true first."""
        if not self.claim(who):
            return False
        with self._cond:
            while self._active > 1:
                if give_up():
                    self._owner = None
                    self._cond.notify_all()
                    return False
                self._cond.wait(poll)
            return True

    def claim(self, who: int) -> bool:
        """Close the gate for `who` (never waits); False if another isolates already."""
        with self._cond:
            if self._owner is not None and self._owner != who:
                return False
            self._owner = who
            return True

    def alone(self, who: int) -> bool:
        """`who` closed the gate and is the only one past it."""
        with self._cond:
            return self._owner == who and self._active <= 1

    def owner(self) -> int | None:
        return self._owner

    def release(self, who: int) -> None:
        if self._owner != who:  # every job's path: only `who` itself makes the owner `who`
            return
        with self._cond:
            if self._owner == who:
                self._owner = None
                self._cond.notify_all()
