"""The multi-process supervisor: `sidequest worker --processes N`.

The supervisor runs no jobs and holds no Redis connection. It starts N worker processes (each
a full `sidequest worker` with its own threads and identity), restarts any that exits without
being asked to, with a back-off per slot so a crash loop does not spin (0.25 s doubling to
30 s, reset once a child has lived 10 s; a child that exits 0 recycled itself on purpose and
is replaced at once), forwards TSTP and TTIN to every child, and on
INT/TERM sends TERM to all and waits for them (each has its own shutdown deadline), killing
stragglers after `timeout + 10` seconds.

Children are fresh interpreters started with the supervisor's own arguments, not forks: the
job code is imported cleanly in each, and nothing is inherited from a process with threads.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

BACKOFF_START, BACKOFF_MAX, HEALTHY_AFTER = 0.25, 30.0, 10.0


@dataclass
class Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = 0.0
    restart_at: float | None = None
    restarts: int = field(default=0)


def child_arguments(argv: list[str]) -> list[str]:
    """The worker arguments for a child: the supervisor's, without `--processes`, plus the child flag."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return [*out, "--swarm-child"]


class Swarm:
    def __init__(self, count: int, child_args: list[str], timeout: float, env: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.env = env
        self.slots = [Slot(i) for i in range(count)]
        self.command = [sys.executable, "-m", "sidequest.cli", "worker", *child_args]
        self.timeout = timeout
        self.clock = clock
        self.stopping = False

    def _spawn(self, slot: Slot) -> None:
        slot.proc = subprocess.Popen(self.command, env=self.env)
        slot.started = self.clock()
        slot.restart_at = None
        log.info("started worker process %d (pid %d)", slot.index, slot.proc.pid)

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def tend(self) -> None:
        """Notice children that exited and restart those whose back-off has passed."""
        now = self.clock()
        for slot in self.slots:
            if slot.proc is not None and slot.restart_at is None:
                code = slot.proc.poll()
                if code is None:
                    continue
                lived = now - slot.started
                if code == 0:  # a planned recycle (--max-jobs, --max-memory, a stuck job): at once
                    slot.delay = 0.0
                elif lived >= HEALTHY_AFTER:
                    slot.delay = BACKOFF_START
                else:
                    slot.delay = min(max(slot.delay * 2, BACKOFF_START), BACKOFF_MAX)
                slot.restart_at = now + slot.delay
                slot.restarts += 1
                log.warning("worker process %d (pid %d) exited with code %s after %.1f s; restarting in %.2f s",
                            slot.index, slot.proc.pid, code, lived, slot.delay)
            if slot.restart_at is not None and now >= slot.restart_at and not self.stopping:
                self._spawn(slot)

    def forward(self, sig: int) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(sig)

    def stop(self) -> int:
        """TERM every child, wait for all, kill any past the deadline. Returns the exit code."""
        self.stopping = True
        self.forward(signal.SIGTERM)
        deadline = self.clock() + self.timeout + 10.0
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(max(deadline - self.clock(), 0.1))
            except subprocess.TimeoutExpired:
                log.error("worker process %d (pid %d) did not stop in time; killing it", slot.index, slot.proc.pid)
                slot.proc.kill()
                slot.proc.wait()
        log.info("all worker processes stopped")
        return 0

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.slots if s.proc is not None and s.proc.poll() is None]


def run_swarm(count: int, argv: list[str], timeout: float, redis_url: str) -> int:
    """Main loop of the supervisor; signals arrive through the CLI's self-pipe."""
    from .cli import SignalPipe

    # Children use the Redis the supervisor resolved (the embedded one, say), not each their own.
    swarm = Swarm(count, child_arguments(argv), timeout, env={**os.environ, "REDIS_URL": redis_url})
    pipe = SignalPipe([signal.SIGINT, signal.SIGTERM, signal.SIGTSTP, signal.SIGTTIN])
    log.info("supervisor %d starting %d worker processes", os.getpid(), count)
    swarm.start()
    while True:
        for sig in pipe.wait(0.2):
            if sig in (signal.SIGINT, signal.SIGTERM):
                log.info("%s received: stopping all worker processes", signal.Signals(sig).name)
                return swarm.stop()
            swarm.forward(sig)
        swarm.tend()
