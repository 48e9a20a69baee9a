"""One worker process's own counters: jobs processed and failed since the last beat, and the
table of its running jobs, kept in memory and flushed to Redis by the heartbeat (into Sidekiq's
`stat:*` totals and `<identity>:work` hash).

Counting in memory and flushing with each beat keeps the per-job hot path free of Redis
writes for statistics, as Sidekiq does. Its neighbours: `job_metrics` counts per job name and
minute (a lifecycle feature, also flushed by the heartbeat); `api.stats` reads the cluster-wide
totals these counts become (Sidekiq's `Stats`); `api.job_metrics` reads the per-job metrics;
`web.prometheus` serves both at `/metrics`.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class Counter:
    """A thread-safe counter that hands over its value on `reset()`."""

    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    def incr(self, by: int = 1) -> None:
        with self._lock:
            self._value += by

    def reset(self) -> int:
        with self._lock:
            value, self._value = self._value, 0
            return value

    @property
    def value(self) -> int:
        return self._value


class WorkState:
    """Running jobs by thread id: what Sidekiq's `<identity>:work` hash shows."""

    def __init__(self) -> None:
        self._work: dict[str, tuple[str, bytes, float]] = {}  # one dict operation per job: atomic

    def start(self, tid: str, queue: str, raw: bytes) -> None:
        self._work[tid] = (queue, raw, time.time())

    def finish(self, tid: str) -> None:
        self._work.pop(tid, None)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {tid: {"queue": queue, "payload": raw.decode("utf-8", "replace"), "run_at": int(at)}
                for tid, (queue, raw, at) in list(self._work.items())}

    def __len__(self) -> int:
        return len(self._work)


class ProcessCounters:
    """Everything one worker process counts (not Sidekiq's `Stats`: that is `api.Stats`)."""

    def __init__(self) -> None:
        self.processed = Counter()
        self.failed = Counter()
        self.work = WorkState()
        self.flushed = 0  # processed counts already handed to Redis by the heartbeat

    def total(self) -> int:
        """Jobs processed by this process since it started."""
        return self.flushed + self.processed.value
