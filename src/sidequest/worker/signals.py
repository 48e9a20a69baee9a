"""OS signals, for the CLI only: handlers record, the main thread acts through a table.

Handlers write the signal number to a self-pipe and return; the CLI's main loop reads it and
calls the launcher (or supervisor) method that `SIGNAL_ACTIONS` names. Nothing else in
sidequest sends or handles a signal: an embedded launcher is controlled by method calls.

    INT, TERM   stop: running jobs get `timeout` seconds, the rest go back to their queues;
                a second INT/TERM while stopping means stop now (put running jobs back, exit)
    TSTP        quiet: finish running jobs, take no new ones
    TTIN        log every thread's stack
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import traceback
from typing import Any

log = logging.getLogger(__name__)

SIGNAL_ACTIONS: dict[int, str] = {signal.SIGINT: "stop", signal.SIGTERM: "stop", signal.SIGTSTP: "quiet",
                  signal.SIGTTIN: "dump"}


class SignalPipe:
    """Self-pipe: handlers write a byte, the main loop reads and acts."""

    def __init__(self, signals: list[int] | None = None) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        for sig in signals if signals is not None else list(SIGNAL_ACTIONS):
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: Any) -> None:
        try:
            os.write(self.write_fd, bytes([signum]))
        except BlockingIOError:
            pass

    def wait(self, timeout: float) -> list[str]:
        """The actions of the signals received within `timeout` seconds, in order."""
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        if not ready:
            return []
        received = list(os.read(self.read_fd, 64))
        for sig in received:
            log.info("%s received", signal.Signals(sig).name)
        return [SIGNAL_ACTIONS[sig] for sig in received if sig in SIGNAL_ACTIONS]


def dump_threads() -> None:
    """Log the stack of every thread (TTIN)."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or 0)
        stack = "".join(traceback.format_stack(frame)) if frame else "(no frame)\n"
        log.warning("thread %s (%s):\n%s", thread.name, format(thread.ident or 0, "x"), stack.rstrip())
