"""`/metrics`: the cluster's numbers in Prometheus' text format, read through the admin API at
each scrape (the totals from `api.stats`, the per-job counts from `api.job_metrics`), with the
official client library (`prometheus_client`), every name `sidequest_`.

    sidequest_processed_total, sidequest_failed_total        all time (Redis `stat:*`)
    sidequest_enqueued, sidequest_scheduled, sidequest_retries, sidequest_dead
    sidequest_queue_size{queue}, sidequest_queue_latency_seconds{queue}, sidequest_queue_paused{queue}
    sidequest_queue_lanes_waiting{queue}                      jobs still in the queue's lanes (`api.groups`)
    sidequest_queue_busy{queue}, sidequest_queue_capacity{queue}                        (`api.Load`)
    sidequest_capsule_busy{capsule,queue}, sidequest_capsule_capacity{capsule}
    sidequest_processes, sidequest_busy, sidequest_concurrency
    sidequest_job_processed_total{job}, sidequest_job_failed_total{job},
    sidequest_job_runtime_seconds_total{job}, sidequest_job_expired_total{job}
    sidequest_job_debounced_total{job}, sidequest_job_throttled_total{job}   all time (`api.flow_counts`)
    sidequest_job_steps_total{job,outcome}, sidequest_job_step_seconds_total{job}   durable steps (`features.steps`):
                                                          outcome ran, failed or replayed; never by step name

Per-job counts exist in Redis only per minute, kept 72 hours (see `sidequest.features.job_metrics`): a sum
over them would fall as old minutes expire, which Prometheus reads as counter resets. So each
app keeps its own per-job counters, which start at zero with the process (as any exporter's do)
and grow by what each scrape finds new in the last `RECENT_MINUTES` minutes (a worker writes a
minute's counts with its heartbeat, seconds after the minute's runs ended).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidequest.api import Load, MetricsQuery, Stats, flow_counts, lanes_waiting
from sidequest.client.sync_client import Client
from sidequest.features.job_metrics import window
from sidequest.features.steps.observer import read_minutes

RECENT_MINUTES = 10


class JobCounters:
    """Monotonic per-job counters (runs, failures, seconds, expired jobs) built from the per-minute metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, dict[str, tuple[int, int, float, int]]] = {}  # minute -> job -> counted so far
        self.totals: dict[str, list[float]] = {}  # job -> [runs, failed, ms, expired]

    def update(self, query: MetricsQuery) -> dict[str, list[float]]:
        jobs = query.top_jobs(RECENT_MINUTES)
        with self._lock:
            window: set[str] = set()
            for job in jobs:
                totals = self.totals.setdefault(job.name, [0, 0, 0.0, 0])
                for point in job.series:
                    window.add(point.minute)
                    seen = self._seen.setdefault(point.minute, {})
                    runs, failed, ms, expired = seen.get(job.name, (0, 0, 0.0, 0))
                    if point.runs > runs or point.failed > failed or point.total_ms > ms or point.expired > expired:
                        totals[0] += max(point.runs - runs, 0)
                        totals[1] += max(point.failed - failed, 0)
                        totals[2] += max(point.total_ms - ms, 0.0)
                        totals[3] += max(point.expired - expired, 0)
                        seen[job.name] = (max(point.runs, runs), max(point.failed, failed), max(point.total_ms, ms),
                                          max(point.expired, expired))
            if window:  # minutes that left the window are final: forget them
                oldest = min(window)
                for minute in [m for m in self._seen if m < oldest]:
                    del self._seen[minute]
            return {name: list(values) for name, values in self.totals.items()}


class StepCounters:
    """Monotonic step counters per job class, grown by what each scrape finds new in the recent
    minutes (as `JobCounters`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, dict[str, tuple[int, int, int, float]]] = {}  # minute -> job -> counted so far
        self.totals: dict[str, list[float]] = {}  # job -> [ran, failed, replayed, seconds]

    def update(self, client: Client) -> dict[str, list[float]]:
        minutes = window(client.clock(), RECENT_MINUTES)
        found = read_minutes(client.redis, minutes)
        with self._lock:
            for minute, jobs in found.items():
                seen = self._seen.setdefault(minute, {})
                for name, tally in jobs.items():
                    now = (tally.ran, tally.failed, tally.replayed, tally.seconds)
                    before = seen.get(name, (0, 0, 0, 0.0))
                    totals = self.totals.setdefault(name, [0, 0, 0, 0.0])
                    for index in range(4):
                        totals[index] += max(now[index] - before[index], 0)
                    seen[name] = tuple(max(a, b) for a, b in zip(now, before, strict=True))  # type: ignore[assignment]
            for minute in [m for m in self._seen if m < minutes[0]]:
                del self._seen[minute]
            return {name: list(values) for name, values in self.totals.items()}


class SidequestCollector(Collector):
    def __init__(self, client: Client, counters: JobCounters, steps: StepCounters | None = None) -> None:
        self.client = client
        self.counters = counters
        self.steps = steps or StepCounters()

    def collect(self) -> Iterator[Metric]:
        stats = Stats(self.client)
        processed = CounterMetricFamily("sidequest_processed", "Jobs processed, all time (done or failed).")
        processed.add_metric([], stats.processed)
        failed = CounterMetricFamily("sidequest_failed", "Job runs that failed, all time.")
        failed.add_metric([], stats.failed)
        yield processed
        yield failed
        for name, value, text in (
            ("enqueued", stats.enqueued, "Jobs waiting in every queue."),
            ("scheduled", stats.scheduled_size, "Jobs in the scheduled set."),
            ("retries", stats.retry_size, "Jobs in the retry set."),
            ("dead", stats.dead_size, "Jobs in the dead set."),
            ("processes", stats.processes_size, "Worker processes alive."),
            ("busy", stats.workers_size, "Threads running a job, over every process."),
        ):
            yield GaugeMetricFamily(f"sidequest_{name}", text, value=value)
        load = Load(self.client)
        yield GaugeMetricFamily("sidequest_concurrency", "Threads of every worker process.", value=load.concurrency)
        size = GaugeMetricFamily("sidequest_queue_size", "Jobs waiting in the queue.", labels=["queue"])
        latency = GaugeMetricFamily("sidequest_queue_latency_seconds",
                                    "Seconds the queue's oldest job has waited.", labels=["queue"])
        paused = GaugeMetricFamily("sidequest_queue_paused", "1 if the queue is paused.", labels=["queue"])
        laned = GaugeMetricFamily("sidequest_queue_lanes_waiting", "Jobs pushed with a group or a priority still "
                                  "waiting in the queue's lanes (not yet in its size or latency).", labels=["queue"])
        in_lanes = lanes_waiting([queue.name for queue in stats.queue_summaries], self.client)
        for queue in stats.queue_summaries:
            size.add_metric([queue.name], queue.size)
            latency.add_metric([queue.name], queue.latency)
            paused.add_metric([queue.name], 1 if queue.paused else 0)
            laned.add_metric([queue.name], in_lanes[queue.name])
        yield size
        yield latency
        yield paused
        yield laned
        yield from _load(load)
        jobs = self.counters.update(MetricsQuery(self.client))
        runs = CounterMetricFamily("sidequest_job_processed", "Runs of the job that ended, counted since this "
                                   "exporter started.", labels=["job"])
        fails = CounterMetricFamily("sidequest_job_failed", "Runs of the job that failed, counted since this "
                                    "exporter started.", labels=["job"])
        seconds = CounterMetricFamily("sidequest_job_runtime_seconds", "Seconds the job's runs took, counted "
                                      "since this exporter started.", labels=["job"])
        expired = CounterMetricFamily("sidequest_job_expired", "Jobs dropped unstarted past their deadline "
                                      "(expires_in), counted since this exporter started.", labels=["job"])
        for name in sorted(jobs):
            count, failures, ms, dropped = jobs[name]
            runs.add_metric([name], count)
            fails.add_metric([name], failures)
            seconds.add_metric([name], ms / 1000)
            expired.add_metric([name], dropped)
        yield runs
        yield fails
        yield seconds
        yield expired
        yield from _steps(self.steps.update(self.client))
        yield from _flow(self.client)


def _steps(jobs: dict[str, list[float]]) -> Iterator[Metric]:
    steps = CounterMetricFamily("sidequest_job_steps", "Durable steps of the job: bodies that ran, of which "
                                "failed, and steps replayed from their record, counted since this exporter "
                                "started.", labels=["job", "outcome"])
    seconds = CounterMetricFamily("sidequest_job_step_seconds", "Seconds in the job's step bodies, counted "
                                  "since this exporter started.", labels=["job"])
    for name in sorted(jobs):
        ran, failed, replayed, spent = jobs[name]
        for outcome, value in (("ran", ran), ("failed", failed), ("replayed", replayed)):
            steps.add_metric([name, outcome], value)
        seconds.add_metric([name], spent)
    yield steps
    yield seconds


def _load(load: Load) -> Iterator[Metric]:
    """Per queue and per capsule, the jobs running now and the slots that fetch from it: with the
    queue's size and latency, what an autoscaler reads (see docs/deployment.md, Kubernetes)."""
    busy = GaugeMetricFamily("sidequest_queue_busy", "Jobs from the queue running now, over every process.",
                             labels=["queue"])
    capacity = GaugeMetricFamily("sidequest_queue_capacity", "Slots of live worker processes (not quiet) "
                                 "that fetch from the queue.", labels=["queue"])
    for name in sorted(load.queues):
        busy.add_metric([name], load.queues[name].busy)
        capacity.add_metric([name], load.queues[name].capacity)
    capsule_busy = GaugeMetricFamily("sidequest_capsule_busy", "Jobs of the capsule running now, per queue, "
                                     "over every process.", labels=["capsule", "queue"])
    capsule_capacity = GaugeMetricFamily("sidequest_capsule_capacity", "Slots of the capsule in live worker "
                                         "processes (not quiet).", labels=["capsule"])
    for name in sorted(load.capsules):
        capsule_capacity.add_metric([name], load.capsules[name].capacity)
        for queue, count in sorted(load.capsules[name].busy.items()):
            capsule_busy.add_metric([name, queue], count)
    yield from (busy, capacity, capsule_busy, capsule_capacity)


def _flow(client: Client) -> Iterator[Metric]:
    """The pushes debounce replaced and throttle dropped, per job: kept totals in Redis, so
    counters as they are (no per-exporter bookkeeping)."""
    counts = flow_counts(client)
    replaced = CounterMetricFamily("sidequest_job_debounced", "Pushes a later push of the same key replaced "
                                   "(debounce), all time.", labels=["job"])
    dropped = CounterMetricFamily("sidequest_job_throttled", "Pushes dropped within a throttle period, all time.",
                                  labels=["job"])
    for name in sorted(counts):
        replaced.add_metric([name], counts[name]["replaced"])
        dropped.add_metric([name], counts[name]["dropped"])
    yield replaced
    yield dropped


def routes(client: Client) -> list[Route]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidequestCollector(client, JobCounters()))

    def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST,
                        headers={"Cache-Control": "no-store"})

    return [Route("/metrics", metrics)]
