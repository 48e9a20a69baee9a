"""A worker's process tree, watched with psutil: its CPU time, its memory, when it is idle, and
stopping it with nothing left behind.

CPU time of the tree = for every live process in it, user + system + children_user +
children_system. A child that exits is reaped by its parent, whose children_* times then hold
it, so forked helpers (a job per fork, a pool that recycles processes) are counted, once each.
A sampling thread (every 0.1 s) keeps track of the tree's processes and the peak of its summed RSS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from typing import Any

import psutil

from .peers import PhaseError

MB = 1024 * 1024


def running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Tree:
    """The worker `proc` and all its descendants."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.root = psutil.Process(proc.pid)
        self.seen: dict[int, psutil.Process] = {proc.pid: self.root}
        self.started = time.monotonic()
        self.peak = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def processes(self) -> list[psutil.Process]:
        try:
            found = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        with self._lock:
            for p in found:
                self.seen.setdefault(p.pid, p)
        return found

    def cpu(self) -> float:
        """Seconds of CPU used by the tree so far (children that exited included)."""
        total = 0.0
        for p in self.processes():
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def rss(self) -> list[dict[str, Any]]:
        """Each live process of the tree: pid, name, RSS in MB."""
        found = []
        for p in self.processes():
            try:
                found.append({"pid": p.pid, "name": p.name(), "rss_mb": p.memory_info().rss / MB})
            except psutil.Error:
                continue
        return found

    def idle_memory(self) -> list[dict[str, Any]]:
        """rss() plus each process's PSS (its share of pages shared with forks), read once at idle."""
        found = self.rss()
        for entry in found:
            try:
                entry["pss_mb"] = psutil.Process(entry["pid"]).memory_full_info().pss / MB
            except (psutil.Error, AttributeError):
                pass
        return found

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            total = sum(int(p["rss_mb"] * MB) for p in self.rss())
            self.peak = max(self.peak, total)

    def reset_peak(self) -> None:
        self.peak = sum(int(p["rss_mb"] * MB) for p in self.rss())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self, what: str) -> None:
        if not self.alive():
            raise PhaseError(f"the worker exited ({self.proc.returncode}) {what}")

    def wait_idle(self, timeout: float, window: float = 1.0, share: float = 0.02) -> str:
        """Return once, at least `window` s after start, the tree used less than `share` of one
        CPU over the last `window` s with an unchanged set of processes ('' then; a note if
        `timeout` passed first)."""
        samples: deque[tuple[float, float, frozenset[int]]] = deque()
        while True:
            now, cpu = time.monotonic(), self.cpu()
            pids = frozenset(p.pid for p in self.processes())
            samples.append((now, cpu, pids))
            while len(samples) > 1 and samples[1][0] <= now - window:
                samples.popleft()
            then, cpu_then, pids_then = samples[0]
            if (now - self.started >= window and now - then >= window * 0.95
                    and cpu - cpu_then < share * (now - then) and pids == pids_then):
                return ""
            self.check_alive("before it was idle")
            if now - self.started > timeout:
                return f"not idle after {timeout:.0f} s (measured anyway)"
            time.sleep(0.1)

    def wait_age(self, seconds: float) -> None:
        delay = self.started + seconds - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def stop(self, timeout: float) -> str:
        """SIGTERM the worker; SIGKILL the whole tree after `timeout`. Return a note on what it took."""
        self._stop.set()
        self.processes()
        note = ""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                note = f"did not stop within {timeout:.0f} s of SIGTERM: killed"
        with self._lock:
            left = [p for p in self.seen.values() if running(p)]
        if left and not note:
            note = f"{len(left)} process(es) left after the worker exited: killed"
        self.kill(left)
        return note

    def kill(self, left: list[psutil.Process]) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own session (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
