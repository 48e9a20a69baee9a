"""The admin API's query over the per-job metrics (Sidekiq's `Metrics::Query`): a window of
minutes, kept 72 hours, as typed summaries.

Worker processes count every run that ended (done, retried, dead, dropped), and every job dropped
unstarted past its deadline (`expires_in`), per job name and UTC minute and write the counts with
their heartbeat (the feature, `sidequest.features.job_metrics`); this reads them back as summaries: runs,
failures, expired jobs, total and mean run time, p50/p95/p99 (upper bounds of the histogram
bucket holding that share of runs), and a per-minute series for charts; and, per minute and
queue, the longest time a job that started in it had waited in its queue (`latency_per_minute`,
what the dashboard's queue-latency chart starts from). Not `api.stats`, which
reads the cluster-wide totals (processed, failed, queue sizes) that Sidekiq's `Stats` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sidequest.client.sync_client import Client, default_client
from sidequest.features.job_metrics import RETENTION, JobMetrics, read, read_latency, window

MAX_MINUTES = RETENTION // 60  # 72 h


@dataclass(frozen=True)
class MinutePoint:
    """One UTC minute of one job name."""

    minute: str  # "YYYYMMDDHHMM", UTC
    at: float  # the minute's start, epoch seconds
    runs: int  # runs that ended in it
    failed: int  # of which failed
    total_ms: float  # their total run time, milliseconds
    expired: int = 0  # jobs dropped unstarted in it, past their deadline (`expires_in`); not runs


@dataclass(frozen=True)
class LatencyPoint:
    """One UTC minute of every queue's latency."""

    minute: str  # "YYYYMMDDHHMM", UTC
    at: float  # the minute's start, epoch seconds
    queues: dict[str, float]  # queue -> the longest a job started in this minute had waited, seconds;
    # a queue no job of which started in the minute is absent

    @property
    def longest(self) -> float:
        """The longest wait over every queue (0.0 when no job started)."""
        return max(self.queues.values(), default=0.0)


@dataclass(frozen=True)
class JobSummary:
    """One job name over the window."""

    name: str  # the job's registered name
    runs: int
    failed: int
    total_ms: float
    mean_ms: float
    failure_rate: float  # failed / runs (0.0 without runs)
    p50_ms: float
    p95_ms: float
    p99_ms: float
    series: list[MinutePoint]  # every minute of the window, oldest first (zeros included)
    expired: int = 0  # jobs dropped unstarted past their deadline (`expires_in`); not runs


class MetricsQuery:
    """Read per-job metrics.

    ```python
    query = MetricsQuery()
    for job in query.top_jobs(minutes=60):           # most total run time first
        job.name, job.runs, job.failed, job.p95_ms
    query.for_job("SendWelcome", minutes=24 * 60).series
    ```
    """

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or default_client()

    def top_jobs(self, minutes: int = 60, limit: int | None = None) -> list[JobSummary]:
        """Every job name that ran in the last `minutes` (at most 72 h), most total time first."""
        found = self._read(minutes, None)
        ranked = sorted(found, key=lambda s: (-s.total_ms, s.name))
        return ranked if limit is None else ranked[:limit]

    def for_job(self, name: str, minutes: int = 60) -> JobSummary:
        """One job name over the last `minutes` (all zeros if it did not run)."""
        found = self._read(minutes, [name])
        return found[0] if found else _summary(JobMetrics(name), self._window(minutes))

    def per_minute(self, minutes: int = 60) -> list[MinutePoint]:
        """Every job name's runs, failures, run time and expired jobs added up per minute over the
        last `minutes` (at most 72 h), oldest first, the current minute (still being written) last:
        the history the dashboard's throughput chart and `sidequest stats --minutes` start from.

            [(p.at, p.runs, p.failed) for p in MetricsQuery().per_minute(10)]
        """
        now = self.client.clock()
        jobs = read(self.client.redis, _span(minutes), now).values()
        return [_point(minute, [job.per_minute.get(minute, (0, 0, 0.0)) for job in jobs],
                       sum(job.expired_per_minute.get(minute, 0) for job in jobs))
                for minute in window(now, _span(minutes))]

    def latency_per_minute(self, minutes: int = 60) -> list[LatencyPoint]:
        """Each queue's latency per minute over the last `minutes` (at most 72 h), oldest first,
        the current minute last: the longest time a job that started in that minute had waited
        between its enqueue and its start (the age of the queue's oldest job when it was taken,
        what the dashboard's latency chart draws live). A queue nobody took from has no points.

            [(p.at, p.queues.get("default")) for p in MetricsQuery().latency_per_minute(10)]
        """
        found = read_latency(self.client.redis, _span(minutes), self.client.clock())
        return [LatencyPoint(minute, _start(minute), queues) for minute, queues in found.items()]

    def _window(self, minutes: int) -> list[str]:
        return window(self.client.clock(), _span(minutes))

    def _read(self, minutes: int, names: list[str] | None) -> list[JobSummary]:
        span = self._window(minutes)
        found = read(self.client.redis, _span(minutes), self.client.clock(), names)
        return [_summary(job, span) for job in found.values()]


def _span(minutes: int) -> int:
    return min(max(minutes, 1), MAX_MINUTES)


def _point(minute: str, counts: list[tuple[int, int, float]], expired: int) -> MinutePoint:
    """One minute's point from (runs, failed, ms) of each job name in it."""
    return MinutePoint(minute, _start(minute), sum(c[0] for c in counts), sum(c[1] for c in counts),
                       sum(c[2] for c in counts), expired)


def _start(minute: str) -> float:
    return datetime.strptime(minute, "%Y%m%d%H%M").replace(tzinfo=UTC).timestamp()


def _summary(job: JobMetrics, span: list[str]) -> JobSummary:
    series = [_point(minute, [job.per_minute.get(minute, (0, 0, 0.0))], job.expired_per_minute.get(minute, 0))
              for minute in span]
    return JobSummary(job.name, job.runs, job.failed, job.total_ms, job.mean_ms, job.failure_rate,
                      job.percentile(0.50), job.percentile(0.95), job.percentile(0.99), series, job.expired)
