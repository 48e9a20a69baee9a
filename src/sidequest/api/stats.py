"""Cluster-wide numbers (Sidekiq's `Stats` and `Stats::History`), read in two round trips.

`Stats()` reads a snapshot when it is built: totals, set sizes, processes and busy threads,
and every queue's size, latency and paused flag. Build a new one to read again. The totals are
what every process's `counters` add up to with each heartbeat; per job name and minute, read
`api.job_metrics` (`MetricsQuery`) instead.

In Cluster mode (see `keys.ClusterKeyspace`) the scheduled, retry and dead sizes are the sums of
every queue's own sets, read with the queues in the second round trip (redis-py's cluster
pipeline sends each command to its slot's primary); the counters are read as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypedDict, cast

from sidequest.api.queues import latency_of
from sidequest.client.sync_client import Client, default_client
from sidequest.store import keys

STATS = ("processed", "failed")
MAX_DAYS = 5 * 365  # daily counters are kept five years


@dataclass(frozen=True)
class QueueSummary:
    """One queue in the stats snapshot."""

    name: str
    size: int  # jobs waiting
    latency: float  # seconds the oldest has waited (0.0 when empty)
    paused: bool  # skipped by every sidequest worker


class StatsDict(TypedDict):
    """The stats snapshot as plain JSON (`Stats.as_dict()`)."""

    processed: int
    """Jobs processed, all time (done or failed)."""
    failed: int
    """Jobs that failed, all time (each failed attempt counts)."""
    enqueued: int
    """Jobs waiting in every queue."""
    scheduled_size: int
    """Entries in `schedule`."""
    retry_size: int
    """Entries in `retry`."""
    dead_size: int
    """Entries in `dead`."""
    processes_size: int
    """Worker processes registered (Ruby Sidekiq's included)."""
    workers_size: int
    """Threads busy with a job right now, over every process."""
    default_queue_latency: float
    """Seconds the oldest job of the `default` queue has waited."""
    queues: list[dict[str, Any]]
    """Every queue: {"name", "size", "latency", "paused"}, largest first."""


class Stats:
    """A snapshot of the cluster's numbers.

    ```python
    stats = Stats()
    stats.processed, stats.failed, stats.enqueued
    stats.scheduled_size, stats.retry_size, stats.dead_size
    stats.processes_size, stats.workers_size
    stats.queues                      # {"mail": 12, "default": 3}, largest first
    stats.queue_summaries             # with latency and paused
    stats.history(7).processed        # {"2026-11-22": 1200, ...}, today first
    ```
    """

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or default_client()
        redis = self.client.redis
        space = self.client.keys
        pipe = redis.pipeline(transaction=False)
        pipe.get(keys.STAT_PROCESSED)
        pipe.get(keys.STAT_FAILED)
        if not space.cluster:  # in Cluster mode each queue has its own sets: counted per queue below
            for sorted_set in (keys.SCHEDULE, keys.RETRY, keys.DEAD):
                pipe.zcard(sorted_set)
        pipe.smembers(keys.PROCESSES)
        pipe.smembers(keys.QUEUES)
        pipe.smembers(keys.PAUSED)
        first = pipe.execute()
        processed, failed, processes, queues, paused = *first[:2], *first[-3:]
        identities = sorted(p.decode("utf-8", "replace") for p in processes)
        names = sorted(q.decode("utf-8", "replace") for q in queues)
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hget(keys.process(identity), "busy")
        for name in names:
            pipe.llen(space.queue(name))
            pipe.lindex(space.queue(name), -1)
        if space.cluster:
            for name in names:
                for per_queue_set in (space.schedule, space.retry, space.dead):
                    pipe.zcard(per_queue_set(name))
        found = pipe.execute()
        now = self.client.clock()
        paused_names = {p.decode("utf-8", "replace") for p in paused}
        per_queue = found[len(identities):len(identities) + 2 * len(names)]
        summaries = [QueueSummary(name, int(per_queue[2 * i]), latency_of(per_queue[2 * i + 1], now),
                                  name in paused_names) for i, name in enumerate(names)]
        set_sizes = first[2:-3] if not space.cluster else found[len(identities) + 2 * len(names):]
        scheduled, retries, dead = (sum(set_sizes[i::3]) for i in range(3))
        self.processed = int(processed or 0)
        self.failed = int(failed or 0)
        self.scheduled_size = int(scheduled)
        self.retry_size = int(retries)
        self.dead_size = int(dead)
        self.processes_size = len(identities)
        self.workers_size = sum(int(busy or 0) for busy in found[:len(identities)])
        self.queue_summaries = sorted(summaries, key=lambda q: (-q.size, q.name))
        self.queues = {q.name: q.size for q in self.queue_summaries}
        self.enqueued = sum(self.queues.values())
        default = next((q for q in summaries if q.name == "default"), None)
        self.default_queue_latency = default.latency if default is not None else 0.0

    def history(self, days: int = 30, start: date | None = None) -> History:
        return History(days, start, self.client)

    def reset(self, *stats: str) -> None:
        """Set the all-time counters (`processed`, `failed`; both when none is named) to 0."""
        chosen = [s for s in STATS if not stats or s in stats]
        unknown = set(stats) - set(STATS)
        if unknown:
            raise ValueError(f"unknown stat {sorted(unknown)[0]!r}; use processed or failed")
        names = {"processed": keys.STAT_PROCESSED, "failed": keys.STAT_FAILED}
        if not self.client.keys.cluster:
            self.client.redis.mset({names[s]: 0 for s in chosen})
            return
        pipe = self.client.redis.pipeline(transaction=False)  # Cluster mode: the two are in two slots
        for stat in chosen:
            pipe.set(names[stat], 0)
        pipe.execute()

    def as_dict(self) -> StatsDict:
        return {
            "processed": self.processed, "failed": self.failed, "enqueued": self.enqueued,
            "scheduled_size": self.scheduled_size, "retry_size": self.retry_size, "dead_size": self.dead_size,
            "processes_size": self.processes_size, "workers_size": self.workers_size,
            "default_queue_latency": self.default_queue_latency,
            "queues": [{"name": q.name, "size": q.size, "latency": q.latency, "paused": q.paused}
                       for q in self.queue_summaries],
        }


class History:
    """Processed and failed jobs per UTC day (Sidekiq's `Stats::History`), newest day first.

    ```python
    History(7).processed     # {"2026-11-22": 1200, "2026-11-21": 980, ...}
    ```
    """

    def __init__(self, days: int = 30, start: date | None = None, client: Client | None = None) -> None:
        if not 1 <= days <= MAX_DAYS:
            raise ValueError(f"days must be between 1 and {MAX_DAYS}, got {days}")
        chosen = client or default_client()
        first = start or datetime.fromtimestamp(chosen.clock(), UTC).date()
        self.days = [(first - timedelta(days=i)).strftime("%Y-%m-%d") for i in range(days)]
        pipe = chosen.redis.pipeline(transaction=False)
        if chosen.keys.cluster:  # one slot per day: a GET each, still one round trip per primary
            for stat in STATS:
                for day in self.days:
                    pipe.get(keys.stat_daily(stat, day))
            found = pipe.execute()
            processed, failed = found[:days], found[days:]
        else:
            for stat in STATS:
                pipe.mget([keys.stat_daily(stat, day) for day in self.days])
            processed, failed = cast("list[list[bytes | None]]", pipe.execute())
        self.processed = {day: int(v or 0) for day, v in zip(self.days, processed, strict=True)}
        self.failed = {day: int(v or 0) for day, v in zip(self.days, failed, strict=True)}
