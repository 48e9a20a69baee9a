"""The tables the admin commands and `top` show, built from admin API objects, and the JSON
shapes of what the API has no `as_dict` for (a running job)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from sidequest.api import History, JobRecord, MinutePoint, Process, QueueSummary, Shard, SortedEntry, Stats, Work
from sidequest.cli.admin import render
from sidequest.features.periodic import PeriodicStatus

# per set: the title of its time column, and whether its entries carry an error worth a column
SET_COLUMNS = {"schedule": ("RUNS", False), "retry": ("NEXT RETRY", True), "dead": ("DIED", True)}


def totals(stats: Stats, busy_of: int | None = None) -> Table:
    busy = f"{stats.workers_size}" if busy_of is None else f"{stats.workers_size} of {busy_of} threads"
    return render.facts([
        ("processed", f"{stats.processed:,}"), ("failed", f"{stats.failed:,}"),
        ("enqueued", f"{stats.enqueued:,}"), ("scheduled", f"{stats.scheduled_size:,}"),
        ("retries", f"{stats.retry_size:,}"), ("dead", f"{stats.dead_size:,}"),
        ("processes", stats.processes_size), ("busy", busy),
        ("default latency", render.span(stats.default_queue_latency)),
    ], title="Totals")


def queues(summaries: Sequence[QueueSummary], title: str | None = "Queues",
           nodes: dict[str, str] | None = None) -> Table:
    """Every queue; with `nodes` (Cluster mode: queue -> its primary's host:port), a NODE column."""
    headers = ("QUEUE", "SIZE", "LATENCY", "PAUSED") + (("NODE",) if nodes is not None else ())
    grid = render.table(*headers, title=title, right=("SIZE", "LATENCY"))
    for q in summaries:
        node = (nodes.get(q.name, "?"),) if nodes is not None else ()
        render.row(grid, q.name, f"{q.size:,}", render.span(q.latency),
                   Text("paused", style="yellow") if q.paused else Text(""), *node)
    return grid


def cluster(shards: Sequence[Shard]) -> Table:
    """A Redis Cluster's primaries (Cluster mode)."""
    grid = render.table("PRIMARY", "REPLICAS", "SLOTS", "KEYS", "MEMORY", "QUEUES", title="Cluster",
                        right=("SLOTS", "KEYS", "MEMORY", "QUEUES"))
    for shard in shards:
        render.row(grid, shard.primary, ", ".join(shard.replicas) or "-", f"{shard.slots:,}",
                   "?" if shard.keys is None else f"{shard.keys:,}", shard.memory_human or "?", len(shard.queues))
    return grid


def history(days: History) -> Table:
    grid = render.table("DAY (UTC)", "PROCESSED", "FAILED", title="History", right=("PROCESSED", "FAILED"))
    for day in days.days:
        render.row(grid, day, f"{days.processed[day]:,}", f"{days.failed[day]:,}")
    return grid


def minutes(points: Sequence[MinutePoint], waits: Mapping[str, Mapping[str, float]]) -> Table:
    """Every job's runs per UTC minute, oldest first (the last one is still being counted), and
    the longest wait of a job started in it (`waits`: minute -> queue -> seconds) with its queue."""
    grid = render.table("MINUTE (UTC)", "RUNS", "FAILED", "MEAN RUN TIME", "LATENCY", title="Per minute",
                        right=("RUNS", "FAILED", "MEAN RUN TIME"))
    for point in points:
        stamp = f"{point.minute[:4]}-{point.minute[4:6]}-{point.minute[6:8]} {point.minute[8:10]}:{point.minute[10:]}"
        mean = f"{point.total_ms / point.runs:,.1f} ms" if point.runs else "-"
        queues = waits.get(point.minute) or {}
        longest = max(queues, key=lambda queue: (queues[queue], queue), default=None)
        latency = f"{render.span(queues[longest])} ({longest})" if longest is not None else "-"
        render.row(grid, stamp, f"{point.runs:,}", f"{point.failed:,}", mean, latency)
    return grid


def processes(found: Sequence[Process], now: float, title: str | None = "Processes") -> Table:
    grid = render.table("IDENTITY", "TAG", "BUSY", "RSS", "BEAT", "STARTED", "QUEUES", "STATE",
                        title=title, right=("BUSY", "RSS"))
    for p in found:
        state = Text("quiet", style="yellow") if p.stopping else Text("running", style="green")
        render.row(grid, p.identity, p.tag, f"{p.busy}/{p.concurrency}", f"{p.rss / 1024:.0f} MB" if p.rss else "-",
                   render.ago(p.beat, now), render.ago(p.started_at, now), ", ".join(p.queues), state)
    return grid


def running(works: Sequence[Work], now: float, title: str | None = "Running") -> Table:
    grid = render.table("PROCESS", "THREAD", "JID", "CLASS", "ARGS", "QUEUE", "FOR", title=title, right=("FOR",))
    for w in works:
        job = w.job
        render.row(grid, w.process_id, w.thread_id, job.jid, job.display_class, render.brief(job.display_args, 40),
                   w.queue, render.span(now - w.run_at))
    return grid


def work_dict(work: Work) -> dict[str, Any]:
    job = work.job
    return {"process": work.process_id, "thread": work.thread_id, "queue": work.queue, "run_at": work.run_at,
            "jid": job.jid, "class_name": job.klass, "display_class": job.display_class, "args": job.args,
            "item": job.item}


def periodic(statuses: Sequence[PeriodicStatus], now: float) -> Table:
    grid = render.table("ID", "SCHEDULE", "JOB", "QUEUE", "NEXT RUN", "LAST RUN", title="Periodic")
    for s in statuses:
        render.row(grid, s.id, s.schedule, s.job, s.queue, render.ago(s.next_run, now), render.ago(s.last_run, now))
    return grid


def flows(counts: Mapping[str, Mapping[str, int]]) -> Table:
    """The pushes debounce replaced and throttle dropped, per job, all time (`api.flow_counts`)."""
    grid = render.table("JOB", "REPLACED (DEBOUNCE)", "DROPPED (THROTTLE)", title="Debounce and throttle")
    for name in sorted(counts):
        render.row(grid, name, f"{counts[name].get('replaced', 0):,}", f"{counts[name].get('dropped', 0):,}")
    return grid


def jobs(entries: Sequence[JobRecord], set_key: str | None, now: float, title: str | None = None) -> Table:
    """Jobs of a queue (`set_key` None) or of `schedule`, `retry` or `dead`, each as the dashboard
    shows it: an ActiveJob by its own class and arguments, not its wrapper's."""
    when, with_error = SET_COLUMNS.get(set_key or "", ("ENQUEUED", False))
    headers = ["JID", "CLASS", "ARGS", "QUEUE", when] + (["RETRIES", "ERROR"] if with_error else [])
    grid = render.table(*headers, title=title, right=("RETRIES",))
    for e in entries:
        at = e.score if isinstance(e, SortedEntry) else e.enqueued_at
        cells: list[Any] = [e.jid, e.display_class, render.brief(e.display_args, 50), e.queue, render.ago(at, now)]
        if with_error:
            error = f"{e.error_class}: {e.error_message}" if e.error_class else "-"
            cells += [e.retry_count, error if len(error) <= 60 else error[:59] + "…"]
        render.row(grid, *cells)
    return grid


def job(entry: JobRecord, set_key: str | None) -> Table:
    """One job, every field people ask about."""
    rows: list[tuple[str, Any]] = [
        ("jid", entry.jid), ("class", shown_class(entry)), ("queue", entry.queue),
        ("args", render.brief(entry.args, 10_000)),
    ]
    if entry.kwargs:
        rows.append(("kwargs", render.brief(entry.kwargs, 10_000)))
    if isinstance(entry, SortedEntry):
        when = {"schedule": "runs at", "retry": "next retry", "dead": "died at"}.get(set_key or "", "score")
        rows.append((when, render.stamp(entry.score)))
    rows += [
        ("created", render.stamp(entry.created_at)), ("enqueued", render.stamp(entry.enqueued_at)),
        ("failed", render.stamp(entry.failed_at)), ("retried", render.stamp(entry.retried_at)),
        ("retry count", entry.retry_count), ("retry", render.brief(entry.get("retry"))),
        ("error", f"{entry.error_class}: {entry.error_message}" if entry.error_class else None),
    ]
    if entry.tags:
        rows.append(("tags", ", ".join(str(t) for t in entry.tags)))
    if entry.invalid:
        rows.append(("invalid", "the stored bytes are not a usable job: delete or kill it"))
    return render.facts(rows)


def shown_class(entry: JobRecord) -> str | None:
    """`SendReceiptJob (ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper)` for a wrapped job, as
    the dashboard's job page shows it; else its class."""
    shown = entry.display_class
    return shown if shown == entry.klass else f"{shown} ({entry.klass})"
