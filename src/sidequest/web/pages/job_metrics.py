"""The dashboard's Job metrics pages: per job name over a window (1 h to 72 h), throughput,
failure rate and run-time percentiles; one job's runs per minute and its run-time histogram;
the pushes debounce replaced and throttle dropped, per job (`api.flow_counts`).

Worker processes write these counts with their heartbeat (the feature, `sidequest.features.job_metrics`),
so the numbers move every few seconds; the pages refresh every `REFRESH_MS`. They read them
through the admin API (`api.job_metrics`); the same counts go to Prometheus from
`web.prometheus`, and the dashboard's front page charts the cluster totals (`api.stats`).
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidequest.api import JobSummary, MetricsQuery, MinutePoint, flow_counts
from sidequest.features.job_metrics import BUCKETS, read
from sidequest.web.site import Site, whole

WINDOWS = ((60, "1 hour"), (480, "8 hours"), (1440, "24 hours"), (4320, "72 hours"))
MAX_POINTS = 180  # a chart's points: longer windows are summed into wider steps
TOP = 6  # job names drawn in the overview chart
REFRESH_MS = 10_000


def _window(request: Request) -> int:
    minutes = whole(request.query_params.get("minutes"), 60)
    return minutes if minutes in dict(WINDOWS) else 60


def _steps(series: list[MinutePoint]) -> list[tuple[float, int, int, float]]:
    """(start, runs, failed, ms) per step of at most MAX_POINTS steps."""
    width = max(1, math.ceil(len(series) / MAX_POINTS))
    steps = []
    for i in range(0, len(series), width):
        chunk = series[i:i + width]
        steps.append((chunk[0].at, sum(p.runs for p in chunk), sum(p.failed for p in chunk),
                      sum(p.total_ms for p in chunk)))
    return steps


def _per_minute_chart(jobs: list[JobSummary], minutes: int) -> dict[str, Any]:
    series = []
    start = end = 0.0
    for job in jobs:
        steps = _steps(job.series)
        width = max(1, math.ceil(len(job.series) / MAX_POINTS))
        series.append({"name": job.name, "points": [[at, runs / width] for at, runs, _, _ in steps]})
        if job.series:
            start, end = job.series[0].at, job.series[-1].at
    return {"series": series, "from": start, "to": end}


def _histogram_chart(name: str, minutes: int, site: Site) -> dict[str, Any]:
    # The admin API's JobSummary has percentiles but not the buckets: read them here.
    found = read(site.client.redis, minutes, site.client.clock(), [name]).get(name)
    counts = found.histogram if found else [0] * len(BUCKETS)
    labels = []
    for bound in BUCKETS:
        if bound == float("inf"):
            labels.append("> 60 s")
        else:
            labels.append(f"≤ {bound / 1000:g} s" if bound >= 1000 else f"≤ {bound:g} ms")
    return {"labels": labels, "series": [{"name": "runs", "values": counts, "color": "var(--c1)"}]}


def routes(site: Site) -> list[Route]:
    def overview(request: Request) -> Response:
        minutes = _window(request)
        jobs = MetricsQuery(site.client).top_jobs(minutes)
        chart = _per_minute_chart(jobs[:TOP], minutes)
        flows = sorted(flow_counts(site.client).items())  # since ever: debounce replaced, throttle dropped
        return site.page(request, "job_metrics.html", page="job-metrics", title="Job metrics", jobs=jobs,
                         minutes=minutes, windows=WINDOWS, chart=chart, refresh_ms=REFRESH_MS, flows=flows)

    def one(request: Request) -> Response:
        minutes = _window(request)
        name = request.path_params["name"]
        job = MetricsQuery(site.client).for_job(name, minutes)
        steps = _steps(job.series)
        width = max(1, math.ceil(len(job.series) / MAX_POINTS))
        throughput = {
            "series": [
                {"name": "runs/min", "points": [[at, runs / width] for at, runs, _, _ in steps], "color": "var(--c1)"},
                {"name": "failed/min", "points": [[at, failed / width] for at, _, failed, _ in steps],
                 "color": "var(--c2)"},
            ],
            "from": steps[0][0] if steps else 0, "to": steps[-1][0] if steps else 0,
        }
        mean = {
            "series": [{"name": "mean run time", "color": "var(--c3)",
                        "points": [[at, (ms / runs) / 1000 if runs else None] for at, runs, _, ms in steps]}],
            "from": throughput["from"], "to": throughput["to"],
        }
        return site.page(request, "job_metric.html", page="job-metrics", title=f"Metrics of {name}", job=job,
                         minutes=minutes, windows=WINDOWS, throughput=throughput, mean=mean,
                         histogram=_histogram_chart(name, minutes, site), refresh_ms=REFRESH_MS)

    return [Route("/job-metrics", overview, name="job-metrics"), Route("/job-metrics/{name:path}", one)]
