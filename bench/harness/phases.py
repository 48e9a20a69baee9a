"""One configuration's measurements in one round, on the shared private redis-server, or for a
Cluster row on the run's private Redis Cluster (harness/cluster.py) (FLUSHALL before each
enqueue and after the configuration is done; never while a worker runs, whose own keys, such as
Celery's queue bindings, must stay):

  throughput   bulk-enqueue N noop jobs (timed by the peer: bulk enqueue jobs/s), rename the
               staged keys aside, start the worker, wait until it is idle (idle RSS), CONFIG
               RESETSTAT, rename the keys back, BLPOP bench:last; jobs/s = N / (last job end -
               first job start), with sidequest's reliable fetch done only once every job is
               acknowledged; worker and Redis CPU per job, peak RSS, Redis commands per job
               (INFO commandstats: commands run inside Lua scripts count too, as does EVALSHA;
               a Cluster's CPU and commands are its primaries' sums).
  latency      the same worker, idle again: p50/p99 latency of stamp jobs enqueued one at a
               time (after 3 discarded), then
  schedule     the lateness (start - due) of jobs scheduled at even steps over S seconds.
  single       with the worker stopped: enqueue a smaller number of jobs one call each (jobs/s).
  ack window   (sidequest rows) the same worker again: how long finished jobs stay in Redis
               before they are acknowledged, p50/p99/max (harness/ackwindow.py).
  group rows   (harness/groups.py) the throughput phase only, with the held row's set-up
               before it and SLOWLOG over it.
  backlog      (--backlog, sidequest only) the throughput of the first N jobs with 1,000,000
               waiting, against the same round's throughput with N waiting.

A phase that fails records n/a (its error and the log's last lines) and the others go on."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psutil
import redis

from . import ackwindow, groups
from .baseline import BASELINES, is_under
from .peers import Peer, PhaseError
from .redisops import COUNT, FIRST, STAMPS, Counted, collect_stamps
from .rows import Settings
from .tree import MB, Tree

SCHEDULE_WARMUP = 6.0  # s of worker age before scheduling: pollers' first, randomised wait is over


@dataclass
class Context:
    peer: Peer
    settings: Settings
    round: int
    counted: Counted  # the row's Redis: the shared server, or the Cluster (its pids: whose CPU counts)
    figures: dict[str, float | None] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def r(self) -> redis.Redis:
        return self.counted.r

    def name(self, phase: str) -> str:
        return f"r{self.round}-{phase}"

    def result(self) -> dict[str, Any]:
        return {"figures": self.figures, "details": self.details, "errors": self.errors, "notes": self.notes}


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))]


@contextmanager
def worker(ctx: Context, total: int, phase: str) -> Iterator[Tree]:
    tree = Tree(ctx.peer.start_worker(total, ctx.name(phase)))
    try:
        yield tree
    finally:
        if note := tree.stop(ctx.settings.stop_timeout):
            ctx.notes.append(f"{phase}: {note}")


def wait_idle(ctx: Context, tree: Tree, phase: str) -> None:
    if note := tree.wait_idle(ctx.settings.idle_timeout):
        ctx.notes.append(f"{phase}: {note}")


def redis_cpu(pids: tuple[int, ...]) -> float:
    return sum(t.user + t.system for t in (psutil.Process(pid).cpu_times() for pid in pids))


def stage(ctx: Context, flush: bool = True) -> list[str]:
    """Bulk-enqueue N jobs (timed by the peer) and rename the keys holding them aside (`flush`:
    on a clean Redis; not after the held row's set-up)."""
    n = groups.jobs(ctx)
    if flush:
        ctx.r.flushall()
    ctx.figures["bulk_enqueue"] = n / ctx.peer.enqueue("bulk", n, ctx.name("bulk"), timeout=900)
    return ctx.counted.aside(ctx.peer.staged_keys(ctx.name("keys")))


def with_worker(ctx: Context) -> None:
    """Throughput, then latency and scheduled lateness, all through one start of the worker."""
    with groups.held_back(ctx) as held:
        measure_worker(ctx, held)


def measure_worker(ctx: Context, held: bool) -> None:
    """with_worker's phases, the held row's groups set up (`held`) or not. A group row measures
    its throughput only (harness/groups.py)."""
    keys: list[str] = []
    n = groups.jobs(ctx)
    guarded(ctx, "throughput", lambda: keys.extend(stage(ctx, flush=not held)))
    with worker(ctx, n, "worker") as tree:
        wait_idle(ctx, tree, "worker start")
        if ctx.peer.row.peer == "sidequest":
            check_source(ctx)
        idle = tree.idle_memory()
        ctx.figures["idle_rss_mb"] = sum(p["rss_mb"] for p in idle)
        ctx.figures["idle_rss_max_mb"] = max((p["rss_mb"] for p in idle), default=None)
        ctx.details["idle_processes"] = idle
        ctx.details["idle_pss_mb"] = sum(p.get("pss_mb", 0) for p in idle)
        if keys:
            guarded(ctx, "throughput", lambda: window(ctx, tree, keys, n))
            wait_idle(ctx, tree, "after the throughput run")
        if groups.is_group_row(ctx):
            return
        guarded(ctx, "latency", lambda: latency(ctx))
        guarded(ctx, "schedule", lambda: schedule(ctx, tree))
        if ctx.peer.row.peer == "sidequest" and ctx.settings.ack_jobs:
            guarded(ctx, "ack window", lambda: ack_window(ctx, tree))


def check_source(ctx: Context) -> None:
    """Which sidequest the worker's processes imported (the peer file logs it): a baseline row's
    checkout, or the working tree's for the others; a note when not."""
    marker = "sidequest_peer: sidequest "
    text = ctx.peer.log(ctx.name("worker")).read_text(errors="replace")
    found = sorted({line.split(" from ", 1)[-1].strip() for line in text.splitlines() if line.startswith(marker)})
    ctx.details["sidequest_from"] = found
    src = ctx.peer.row.src
    wrong = [path for path in found if (not is_under(path, src) if src else is_under(path, str(BASELINES)))]
    if wrong or not found:
        ctx.notes.append(f"worker start: the worker imported sidequest from {', '.join(found) or '(not logged)'}, "
                         f"expected {src or 'the working tree'}")


def window(ctx: Context, tree: Tree, keys: list[str], n: int) -> None:
    """From the jobs' appearance to the last job's end: the throughput phase's measurements."""
    counted = ctx.counted
    counted.reset_stats()
    tree.reset_peak()
    slowlog = groups.is_group_row(ctx)
    if slowlog:
        groups.slowlog_reset(counted)
    cpu0, redis0, shown = tree.cpu(), redis_cpu(counted.pids), time.time()
    counted.back(keys)
    last = counted.wait_last(tree, ctx.settings.run_timeout)
    end = last
    if ctx.peer.row.peer == "sidequest":  # the held row: its held groups' lanes and holder's jobs stay
        drained = keys[:1] if ctx.peer.row.held else keys
        end = max(last, counted.wait_sidequest_acked(drained, groups.others_reserved(ctx)))
    cpu1, redis1 = tree.cpu(), redis_cpu(counted.pids)
    peak = max(tree.peak, sum(p["rss_mb"] for p in tree.rss()) * MB)
    if slowlog:
        groups.slowlog_read(ctx)
    calls = counted.commandstats()
    first, count = float(ctx.r.get(FIRST) or 0), int(ctx.r.get(COUNT) or 0)
    if count != n:
        ctx.notes.append(f"throughput: bench:count is {count}, not {n}")
    total = sum(calls.values())
    ctx.figures.update({
        "throughput": n / (end - first),
        "cpu_us_per_job": (cpu1 - cpu0) / n * 1e6,
        "redis_cpu_us_per_job": (redis1 - redis0) / n * 1e6,
        "commands_per_job": total / n,
        "commands_besides_job": (total - n - 2) / n,  # the job's own: N INCR, one SET, one RPUSH
        "peak_rss_mb": peak / MB,
    })
    ctx.details.update({
        "seconds": end - first, "throughput_to_last": n / (last - first), "first_job_after_s": first - shown,
        "count": count, "commands": {name: calls_ / n for name, calls_ in calls.items()},
        "harness_commands": dict(counted.calls), "processes": len(tree.processes()),
    })


def single(ctx: Context) -> None:
    count = ctx.settings.single_jobs
    ctx.r.flushall()
    ctx.figures["single_enqueue"] = count / ctx.peer.enqueue("single", count, ctx.name("single"), timeout=900)


def latency(ctx: Context) -> None:
    count = ctx.settings.latency_count
    ctx.peer.run("latency", "--count", "3", name=ctx.name("latency-warmup"), timeout=120)  # discarded
    got = ctx.peer.run("latency", "--count", str(count), name=ctx.name("latency"), timeout=60 + 2 * count)
    seconds = [float(x) for x in got["latencies"]]  # type: ignore[index]
    ctx.figures["latency_p50_ms"] = percentile(seconds, 50) * 1000
    ctx.figures["latency_p99_ms"] = percentile(seconds, 99) * 1000
    ctx.details["latency_max_ms"] = max(seconds) * 1000


def schedule(ctx: Context, tree: Tree) -> None:
    count, over = ctx.settings.sched_count, ctx.settings.sched_over
    tree.wait_age(SCHEDULE_WARMUP)
    ctx.r.delete(STAMPS)
    began = time.monotonic()
    ctx.peer.run("schedule", "--count", str(count), "--over", str(over), name=ctx.name("schedule"),
                 timeout=over + 120)
    stamps = collect_stamps(ctx.r, count, began + over + 31)
    tree.check_alive("while scheduled jobs were due")
    if not stamps:
        raise PhaseError(f"none of the {count} scheduled jobs ran within {over + 30:.0f} s of the last due time")
    late = [started - due for due, started in stamps]
    ctx.figures.update({"sched_p50_s": percentile(late, 50), "sched_p99_s": percentile(late, 99),
                        "sched_max_s": max(late)})
    ctx.details.update({"sched_ran": len(stamps), "sched_missing": count - len(stamps), "sched_min_s": min(late)})
    if len(stamps) < count:
        ctx.notes.append(f"schedule: only {len(stamps)} of {count} scheduled jobs ran in time")


def ack_window(ctx: Context, tree: Tree) -> None:
    s = ctx.settings
    found = ackwindow.measure(ctx.r, tree, s.ack_jobs, s.ack_interval, seed=ctx.round, space=ctx.counted.keys)
    stays: list[ackwindow.Stay] = found["stays"]
    if not stays:
        raise PhaseError("no probe job ended")
    ms = [stay.seconds * 1000 for stay in stays]
    ctx.figures.update({"ack_p50_ms": percentile(ms, 50), "ack_p99_ms": percentile(ms, 99), "ack_max_ms": max(ms)})
    gaps = [gap * 1000 for gap in found["gaps"]] or [0.0]
    batch = [stay.seconds * 1000 for stay in stays if stay.batch]
    alone = [stay.seconds * 1000 for stay in stays if not stay.batch]  # acknowledged at once: the floor
    ctx.details.update({
        "ack_jobs": len(stays), "ack_held_after_end": sum(stay.held_after_end for stay in stays),
        "ack_unacknowledged": sum(not stay.acknowledged for stay in stays), "ack_batch_jobs": len(batch),
        "ack_batch_p99_ms": percentile(batch, 99) if batch else None,
        "ack_alone_p99_ms": percentile(alone, 99) if alone else None,
        "ack_resolution_p50_ms": percentile(gaps, 50), "ack_resolution_p99_ms": percentile(gaps, 99),
        "ack_snapshots": len(gaps) + 1, "ack_seconds": found["seconds"],
    })
    if unacknowledged := ctx.details["ack_unacknowledged"]:
        ctx.notes.append(f"ack window: {unacknowledged} finished job(s) still in Redis {ackwindow.LINGER_CAP:.0f} s "
                         "after the last one ended")


def backlog(ctx: Context) -> None:
    n, waiting = ctx.settings.jobs, ctx.settings.backlog_jobs
    ctx.r.flushall()
    ctx.details["backlog_enqueue_s"] = ctx.peer.enqueue("bulk", waiting, ctx.name("backlog-enqueue"), timeout=3600)
    keys = ctx.counted.aside(ctx.peer.staged_keys(ctx.name("keys")))
    with worker(ctx, n, "backlog") as tree:
        wait_idle(ctx, tree, "backlog")
        ctx.counted.back(keys)
        last = ctx.counted.wait_last(tree, ctx.settings.run_timeout)
        first = float(ctx.r.get(FIRST) or 0)
    ctx.r.flushall()
    rate = n / (last - first)
    ctx.figures["backlog_jobs_per_s"] = rate
    base = ctx.details.get("throughput_to_last")  # the same end (bench:last), N waiting
    ctx.figures["backlog_ratio"] = rate / base if base else None


def guarded(ctx: Context, phase: str, run: Callable[[], None]) -> None:
    """Run one phase; on failure record its error (n/a in the table) and go on."""
    began = time.monotonic()
    try:
        run()
    except PhaseError as exc:
        ctx.errors[phase] = str(exc)
    except Exception as exc:  # a harness or peer bug: keep the run going, keep the evidence
        ctx.errors[phase] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    finally:
        spent = ctx.details.setdefault("phase_seconds", {})
        spent[phase] = round(spent.get(phase, 0) + time.monotonic() - began, 2)


def measure(ctx: Context) -> dict[str, Any]:
    guarded(ctx, "worker", lambda: with_worker(ctx))
    if not groups.is_group_row(ctx):
        guarded(ctx, "single", lambda: single(ctx))
    if ctx.settings.backlog and ctx.peer.row.peer == "sidequest":
        guarded(ctx, "backlog", lambda: backlog(ctx))
    ctx.r.flushall()
    return ctx.result()
