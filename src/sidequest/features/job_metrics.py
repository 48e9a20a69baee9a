"""The per-job metrics feature: runs, failures, expired jobs and run times per job name and UTC
minute, kept 72 hours; how they are counted, written and read back.

A lifecycle feature that writes nothing per job: each finished run is appended to an in-memory
deque (an append is atomic, so ten processors never wait on a lock), folded into a table (job
name -> count, failures, total milliseconds, a histogram of run times) once `FOLD_AT` runs wait
(by the processor that appended the last, unless another is folding) and when the heartbeat
(handed `JobMetricsFeature.flush` by the launcher) takes the table, which it writes into
`sidequest:metrics:<YYYYMMDDHHMM>` (see `keys`) in its own MULTI, as Sidekiq 7 does with its
metrics. One hash per minute, fields per job name:

    <name>|p      runs that ended (done, retried, dead, dropped)
    <name>|f      of which failed
    <name>|ms     their total run time, in milliseconds
    <name>|x      jobs dropped unstarted past their deadline (`expires_in`): not runs
    <name>|h<i>   runs whose time fell in bucket i of `BUCKETS` (upper bounds in ms)

and, beside it, `sidequest:metrics:<YYYYMMDDHHMM>:latency`, a sorted set of queue name -> the
longest time (seconds) a job of that queue waited between its enqueue (`enqueued_at`) and its
start, of the jobs that started in that minute: the age the oldest job had reached when it was
taken, which is what the dashboard's queue-latency chart draws (Sidekiq's `Queue#latency`).
Each process writes its own longest with `ZADD GT`, so the fleet's longest stays (Redis 6.2+).
A queue nobody takes from has no entry: its growing latency is only seen live.

`read` turns a window of minutes into totals and percentiles (from the histogram), for the
admin API, the dashboard and the CLI. Its neighbours: `counters` holds one process's totals
(processed, failed: Sidekiq's `stat:*`), not per job; `api.job_metrics` is the admin API's
query over these minutes (`MetricsQuery`); `web.pages.job_metrics` draws them, `web.prometheus`
exports them.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from sidequest.jobs.payload import MILLIS_ABOVE, epoch
from sidequest.store import keys
from sidequest.worker.outcome import EXPIRED, Outcome

RETENTION = 72 * 3600  # seconds a minute of metrics is kept
BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, float("inf"))
ENDS = ("finished", "retried", "dead", "dropped")
# Runs held in the deque before they are folded into the table: a burst of jobs between two beats
# (10,000 in a second) would otherwise hold a tuple, a float and the job's name per run until the
# next beat, about 200 bytes each: 2 MB of a worker's peak RSS.
FOLD_AT = 512


def minute_of(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y%m%d%H%M")


@dataclass
class _Tally:
    runs: int = 0
    failed: int = 0
    ms: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    expired: int = 0


@dataclass
class Taken:
    """What one flush writes: the runs per minute and job name, the longest waits per minute and queue."""

    runs: dict[str, dict[str, _Tally]] = field(default_factory=dict)
    waits: dict[str, dict[str, float]] = field(default_factory=dict)  # minute -> queue -> seconds


class JobMetricsFeature:
    """Counts every run that ended, in memory; `flush(pipe)` writes the counts (heartbeat)."""

    name = "job_metrics"
    marks: frozenset[str] | None = frozenset()  # ops only for payloads with these keys
    observes, wraps = True, False  # whether `observe` and `running` ever do anything
    lua = ""  # nothing runs in Redis per job

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()  # held to fold, take and give back; a processor never waits on it
        # (ended, class, seconds run, failed, queue, enqueued_at) per run, as the payload holds them:
        # every job's path does no more than take them; the minutes, names and waits are worked
        # out when they are folded, once per FOLD_AT runs
        self._runs: deque[tuple[float, Any, float, bool, Any, Any]] = deque()
        self._expired: deque[tuple[int, str]] = deque()  # (minute, name)
        self._taken = Taken()

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        return None

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        if point in ENDS and outcome is not None and outcome.elapsed is not None:
            self._runs.append((self.clock(), payload.get("class", "?"), outcome.elapsed,
                               point != "finished" and not outcome.requested, payload.get("queue", "?"),
                               payload.get("enqueued_at")))
            if len(self._runs) >= FOLD_AT and self._lock.acquire(blocking=False):  # never waits
                try:
                    self._fold()
                finally:
                    self._lock.release()
        elif point == "dropped" and outcome is not None and outcome.reason == EXPIRED:
            self._expired.append((int(self.clock() // 60), str(payload.get("class", "?"))))

    def _fold(self) -> None:
        """Move the runs, expired jobs and waits in the deques into the table (lock held)."""
        labels: dict[int, str] = {}
        longest = self._fold_runs(labels)
        minutes = self._taken.runs
        while self._expired:
            minute, name = self._expired.popleft()
            label = labels.get(minute) or labels.setdefault(minute, minute_of(minute * 60))
            minutes.setdefault(label, {}).setdefault(name, _Tally()).expired += 1
        for (minute, queue), seconds in longest.items():
            label = labels.get(minute) or labels.setdefault(minute, minute_of(minute * 60))
            into = self._taken.waits.setdefault(label, {})
            into[queue] = max(into.get(queue, 0.0), seconds)

    def _fold_runs(self, labels: dict[int, str]) -> dict[tuple[int, str], float]:
        """Fold the runs into the table; returns the longest wait per (minute started, queue): a
        job's wait is counted in the minute it started, as the chart would see it."""
        minutes = self._taken.runs
        tallies: dict[tuple[int, str], _Tally] = {}  # (minute, class) -> its tally: one lookup a run
        longest: dict[tuple[int, str], float] = {}
        while self._runs:
            ended, name, elapsed, failed, queue, enqueued = self._runs.popleft()
            name = name if type(name) is str else str(name)  # keys of the table, as Redis fields will read
            queue = queue if type(queue) is str else str(queue)
            minute = int(ended // 60)
            tally = tallies.get((minute, name))
            if tally is None:
                label = labels.get(minute) or labels.setdefault(minute, minute_of(minute * 60))
                tally = tallies[minute, name] = minutes.setdefault(label, {}).setdefault(name, _Tally())
            ms = elapsed * 1000
            tally.runs += 1
            tally.failed += failed
            tally.ms += ms
            tally.histogram[bisect_left(BUCKETS, ms)] += 1
            # Sidekiq 6/7's float seconds without a call; anything else (Sidekiq 8's milliseconds) as `epoch` reads it
            at = enqueued if type(enqueued) is float and enqueued <= MILLIS_ABOVE else epoch(enqueued)
            if at is not None:
                started = ended - elapsed
                key = (int(started // 60), queue)
                waited = started - at if started > at else 0.0
                if waited >= longest.get(key, -1.0):
                    longest[key] = waited
        return longest

    def take(self) -> Taken:
        with self._lock:
            self._fold()
            taken, self._taken = self._taken, Taken()
        return taken

    def give_back(self, taken: Taken) -> None:
        """Counts a failed flush took: they go out with the next one."""
        with self._lock:
            for minute, queues in taken.waits.items():
                longest = self._taken.waits.setdefault(minute, {})
                for queue, seconds in queues.items():
                    longest[queue] = max(longest.get(queue, 0.0), seconds)
            for minute, names in taken.runs.items():
                mine = self._taken.runs.setdefault(minute, {})
                for name, tally in names.items():
                    into = mine.setdefault(name, _Tally())
                    into.runs += tally.runs
                    into.failed += tally.failed
                    into.ms += tally.ms
                    into.expired += tally.expired
                    into.histogram = [a + b for a, b in zip(into.histogram, tally.histogram, strict=True)]

    def flush(self, pipe: Any) -> Callable[[], None]:
        """Queue the counts taken since the last flush on `pipe` (the heartbeat's MULTI); the
        returned call gives them back, to go out with the next flush, should that MULTI fail."""
        taken = self.take()
        self.write(pipe, taken)
        return lambda: self.give_back(taken)

    @staticmethod
    def write(pipe: Any, taken: Taken) -> None:
        for minute, queues in taken.waits.items():
            key = keys.metrics_latency(minute)
            pipe.zadd(key, {queue: round(seconds, 3) for queue, seconds in queues.items()}, gt=True)
            pipe.expire(key, RETENTION)
        for minute, names in taken.runs.items():
            key = keys.metrics(minute)
            for name, tally in names.items():
                if tally.expired:
                    pipe.hincrby(key, f"{name}|x", tally.expired)
                if not tally.runs:
                    continue
                pipe.hincrby(key, f"{name}|p", tally.runs)
                if tally.failed:
                    pipe.hincrby(key, f"{name}|f", tally.failed)
                pipe.hincrbyfloat(key, f"{name}|ms", round(tally.ms, 3))
                for index, count in enumerate(tally.histogram):
                    if count:
                        pipe.hincrby(key, f"{name}|h{index}", count)
            pipe.expire(key, RETENTION)


@dataclass
class JobMetrics:
    """One job name over a window: what the dashboard's metrics page shows."""

    name: str
    runs: int = 0
    failed: int = 0
    total_ms: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    per_minute: dict[str, tuple[int, int, float]] = field(default_factory=dict)  # minute -> (runs, failed, ms)
    expired: int = 0  # jobs dropped unstarted past their deadline (not runs)
    expired_per_minute: dict[str, int] = field(default_factory=dict)

    @property
    def failure_rate(self) -> float:
        return self.failed / self.runs if self.runs else 0.0

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.runs if self.runs else 0.0

    def percentile(self, fraction: float) -> float:
        """The upper bound (ms) of the bucket holding this fraction of runs; 0 with no runs."""
        target, seen = fraction * self.runs, 0
        for bound, count in zip(BUCKETS, self.histogram, strict=True):
            seen += count
            if count and seen >= target:
                return float(bound)
        return 0.0


def window(now: float, minutes: int) -> list[str]:
    """The last `minutes` UTC minutes up to `now`, oldest first."""
    end = datetime.fromtimestamp(now, UTC).replace(second=0, microsecond=0)
    return [(end - timedelta(minutes=i)).strftime("%Y%m%d%H%M") for i in range(minutes - 1, -1, -1)]


def read(client: redis.Redis, minutes: int = 60, now: float | None = None,
         names: Iterable[str] | None = None) -> dict[str, JobMetrics]:
    """Metrics per job name over the last `minutes` minutes (at most 72 h), one round trip."""
    span = window(time.time() if now is None else now, min(max(minutes, 1), RETENTION // 60))
    pipe = client.pipeline(transaction=False)
    for minute in span:
        pipe.hgetall(keys.metrics(minute))
    wanted = set(names) if names is not None else None
    found: dict[str, JobMetrics] = {}
    for minute, raw in zip(span, pipe.execute(), strict=True):
        per_name: dict[str, dict[str, float]] = {}
        for field_name, value in raw.items():
            name, _, part = field_name.decode().rpartition("|")
            per_name.setdefault(name, {})[part] = float(value)
        for name, parts in per_name.items():
            if wanted is not None and name not in wanted:
                continue
            entry = found.setdefault(name, JobMetrics(name))
            runs, failed, ms = int(parts.get("p", 0)), int(parts.get("f", 0)), parts.get("ms", 0.0)
            entry.runs += runs
            entry.failed += failed
            entry.total_ms += ms
            entry.per_minute[minute] = (runs, failed, ms)
            expired = int(parts.get("x", 0))
            if expired:
                entry.expired += expired
                entry.expired_per_minute[minute] = expired
            for index in range(len(BUCKETS)):
                entry.histogram[index] += int(parts.get(f"h{index}", 0))
    return found


def read_latency(client: redis.Redis, minutes: int = 60, now: float | None = None) -> dict[str, dict[str, float]]:
    """Per minute of the last `minutes` (at most 72 h), oldest first: each queue's longest wait
    (seconds) of the jobs that started in it; {} for a minute no job started in. One round trip."""
    span = window(time.time() if now is None else now, min(max(minutes, 1), RETENTION // 60))
    pipe = client.pipeline(transaction=False)
    for minute in span:
        pipe.zrange(keys.metrics_latency(minute), 0, -1, withscores=True)
    return {minute: {queue.decode(): float(seconds) for queue, seconds in rows}
            for minute, rows in zip(span, pipe.execute(), strict=True)}
