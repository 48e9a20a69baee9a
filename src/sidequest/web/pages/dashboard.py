"""The Dashboard page and the small JSON document every page polls (`/api/stats`).

The page shows the totals, two live charts drawn in the browser from successive `/api/stats`
readings (jobs per second, queue latency), both served filled with the last hour from the
per-minute metrics (`api.job_metrics`: runs and failures; each queue's longest wait), processed
and failed per day, and the Redis server's version, memory and clients (on a Redis Cluster:
its primaries, replicas, keys and memory in all, with a link to the Cluster page).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sidequest.api import Cluster, MetricsQuery, Stats
from sidequest.client.sync_client import Client
from sidequest.store.reasons import reason
from sidequest.web.render import FRAGMENT_HEADER
from sidequest.web.site import Site, nav_counts, whole

HISTORY_DAYS = (7, 30, 90)
RATE_HISTORY = 60  # minutes of per-minute runs the throughput chart is served with (a fixed bound)
LATENCY_QUEUES = 6  # queues the latency chart draws, the longest waits first (the live chart's bound)


def stats_document(stats: Stats) -> dict[str, Any]:
    """What `/api/stats` answers: the nav's numbers, every queue, and the server's time."""
    return {
        **nav_counts(stats),
        "queues": [{"name": q.name, "size": q.size, "latency": round(q.latency, 3), "paused": q.paused}
                   for q in stats.queue_summaries],
        "time": time.time(),
    }


def rate_history(client: Client) -> list[list[float]]:
    """The throughput chart's first points: [minute's start, runs, failed] per finished minute of
    the last hour, oldest first. The current minute is left out: its counts are still arriving
    with each heartbeat, and the live readings cover it. Empty when no job ran in the hour."""
    minutes = MetricsQuery(client).per_minute(RATE_HISTORY + 1)[:-1]
    if not any(point.runs for point in minutes):
        return []
    return [[point.at, point.runs, point.failed] for point in minutes]


def latency_history(client: Client) -> dict[str, Any]:
    """The latency chart's first points, per finished minute of the last hour (as `rate_history`):
    {"queues": the `LATENCY_QUEUES` queues with the longest waits, "minutes": [[minute's start, each
    queue's longest wait in seconds or None when no job of it started then], ...]}. Empty when no
    job started in the hour."""
    minutes = MetricsQuery(client).latency_per_minute(RATE_HISTORY + 1)[:-1]
    peaks: dict[str, float] = {}
    for point in minutes:
        for queue, waited in point.queues.items():
            peaks[queue] = max(peaks.get(queue, 0.0), waited)
    if not peaks:
        return {}
    names = sorted(peaks, key=lambda queue: (-peaks[queue], queue))[:LATENCY_QUEUES]
    return {"queues": names, "minutes": [[point.at, *(point.queues.get(queue) for queue in names)]
                                         for point in minutes]}


def redis_info(client: Client) -> list[tuple[str, str]]:
    """The server facts the dashboard shows, from INFO (one round trip)."""
    try:
        info: dict[str, Any] = client.redis.info()
    except Exception as exc:  # the page still shows everything else
        return [("Error", f"{type(exc).__name__}: {reason(exc)}")]
    name = "Valkey" if "valkey_version" in info else "Redis"
    version = str(info.get("valkey_version", info.get("redis_version", "?")))
    if client.keys.cluster:  # `info` is one node's: the rest is added up over the primaries
        try:
            return cluster_info(client, f"{name} {version}", str(info.get("maxmemory_policy", "?")))
        except Exception as exc:  # as above
            return [("Version", f"{name} {version}"), ("Error", f"{type(exc).__name__}: {reason(exc)}")]
    uptime = int(info.get("uptime_in_seconds", 0))
    return [
        ("Version", f"{name} {version}"),
        ("Uptime", f"{uptime // 86400} d {uptime % 86400 // 3600} h" if uptime >= 86400
         else f"{uptime // 3600} h {uptime % 3600 // 60} min"),
        ("Connected clients", f"{int(info.get('connected_clients', 0)):,}"),
        ("Memory used", str(info.get("used_memory_human", "?"))),
        ("Memory peak", str(info.get("used_memory_peak_human", "?"))),
        ("Max memory", "no limit" if not info.get("maxmemory") else str(info.get("maxmemory_human", "?"))),
        ("Eviction policy", str(info.get("maxmemory_policy", "?"))),
    ]


def cluster_info(client: Client, version: str, policy: str) -> list[tuple[str, str]]:
    """The dashboard's Redis facts on a Redis Cluster: its size and its primaries' totals."""
    cluster = Cluster(client)
    memory = sum(shard.memory or 0 for shard in cluster.shards)
    return [
        ("Version", version),
        ("Cluster", f"{len(cluster.shards)} primaries, {cluster.replicas} replicas"),
        ("Keys", f"{sum(shard.keys or 0 for shard in cluster.shards):,}"),
        ("Memory used", f"{memory / 2**20:,.1f} MB over the primaries"),
        ("Eviction policy", policy),
    ]


def history_chart(stats: Stats, days: int) -> dict[str, Any]:
    """Processed and failed per day, oldest first, for the bar chart."""
    history = stats.history(days)
    ordered = list(reversed(history.days))
    labels = [datetime.strptime(d, "%Y-%m-%d").strftime("%b %d") for d in ordered]
    return {
        "labels": labels,
        "series": [
            {"name": "processed", "values": [history.processed[d] for d in ordered], "color": "var(--c1)"},
            {"name": "failed", "values": [history.failed[d] for d in ordered], "color": "var(--c2)"},
        ],
    }


def routes(site: Site) -> list[Route]:
    def dashboard(request: Request) -> Response:
        stats = Stats(site.client)
        days = whole(request.query_params.get("days"), 30)
        days = days if days in HISTORY_DAYS else 30
        whole_page = not request.headers.get(FRAGMENT_HEADER)  # a live refresh keeps the charts it drew
        return site.page(request, "dashboard.html", page="dashboard", title="Dashboard", stats=stats,
                         totals=nav_counts(stats), days=days, history=history_chart(stats, days),
                         first_reading=stats_document(stats),  # the live charts' first point: the table's data
                         # read for the first paint only
                         rate_history=rate_history(site.client) if whole_page else None,
                         latency_history=latency_history(site.client) if whole_page else None,
                         redis_info=redis_info(site.client), cluster=site.client.keys.cluster)

    def api_stats(request: Request) -> Response:
        return JSONResponse(stats_document(Stats(site.client)), headers={"Cache-Control": "no-store"})

    return [Route("/", dashboard, name="dashboard"), Route("/api/stats", api_stats)]
