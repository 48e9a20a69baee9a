"""`sidequest top`: a live view of the cluster in the terminal, redrawn in place every second.

Each frame is a fresh read through the admin API (a few pipelined round trips): totals with the
processed and failed rates over the last ten seconds, the busiest queues, the processes, the
longest-running jobs and the next periodic runs. If Redis stops answering, the frame says so
and the view keeps trying; Ctrl-C leaves it (exit status 0). `--once` prints one frame and
exits, for scripts and tests.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

import click
import redis

from sidequest.cli.admin.connect import AdminCommand, admin_client, describe, redis_url_option
from sidequest.cli.root import Unreachable, main
from sidequest.store.reasons import reason

if TYPE_CHECKING:
    from rich.console import RenderableType

    from sidequest.client.sync_client import Client
    from sidequest.features.iteration.state import IterationState

QUEUES_SHOWN = 10
PROCESSES_SHOWN = 10
RUNNING_SHOWN = 15
PERIODIC_SHOWN = 5
RATE_WINDOW = 10.0  # seconds the processed and failed rates are averaged over, as the dashboard's


class Top:
    """Builds frames; remembers recent readings to show rates."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.readings: deque[tuple[float, int, int]] = deque()  # (when, processed, failed), oldest first

    def frame(self, strict: bool = False) -> RenderableType:
        """The view now; on a Redis failure a line saying so (or, with `strict`, the error)."""
        from rich.text import Text

        try:
            return self._frame()
        except redis.RedisError as exc:
            if strict:
                raise
            stamp = time.strftime("%H:%M:%S")
            return Text(f"{stamp} Redis at {describe(self.client)} did not answer: {reason(exc)}; trying again",
                        style="red")

    def _frame(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        from sidequest.api import Iteration, ProcessSet, Stats, Workers
        from sidequest.cli.admin import views
        from sidequest.features.periodic import status as periodic_status

        stats = Stats(self.client)
        found = list(ProcessSet(self.client))
        works = list(Workers(self.client))
        upcoming = periodic_status(self.client)
        now = self.client.clock()
        rates = self._rates(now, stats.processed, stats.failed)
        threads = sum(p.concurrency for p in found)
        parts: list[RenderableType] = [
            Text(f"sidequest top  {describe(self.client)}  {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(now))} UTC"
                 "  (Ctrl-C quits)", style="bold"),
            Text(f"processed {stats.processed:,}  failed {stats.failed:,}  enqueued {stats.enqueued:,}  "
                 f"scheduled {stats.scheduled_size:,}  retries {stats.retry_size:,}  dead {stats.dead_size:,}  "
                 f"busy {stats.workers_size}/{threads}{rates}"),
            Text(""),
        ]
        parts += section(views.queues(stats.queue_summaries[:QUEUES_SHOWN]), len(stats.queue_summaries),
                         QUEUES_SHOWN, "queues", "no queues")
        parts += section(views.processes(found[:PROCESSES_SHOWN], now), len(found), PROCESSES_SHOWN,
                         "processes", "no worker processes")
        longest = works[:RUNNING_SHOWN]  # the API lists the oldest start first
        parts += section(views.running(longest, now), len(works), RUNNING_SHOWN, "running jobs", "no jobs running")
        progress = Iteration(self.client).of(longest)
        if progress:  # shown only while an iterable job runs
            parts += section(iterations(progress), len(progress), RUNNING_SHOWN, "iterations", "")
        if upcoming:
            parts += section(views.periodic(upcoming[:PERIODIC_SHOWN], now), len(upcoming), PERIODIC_SHOWN,
                             "periodic entries", "")
        return Group(*parts)

    def _rates(self, now: float, processed: int, failed: int) -> str:
        """Processed and failed per second over the last RATE_WINDOW seconds ("" for the first frame).

        Workers add their counts with each heartbeat (every 5 s by default), so a rate between two
        frames a second apart would jump between 0 and five seconds' worth; a window smooths it.
        """
        self.readings.append((now, processed, failed))
        while len(self.readings) > 2 and now - self.readings[1][0] >= RATE_WINDOW:
            self.readings.popleft()
        first = self.readings[0]
        elapsed = now - first[0]
        if elapsed <= 0:
            return ""
        return (f"  {max(processed - first[1], 0) / elapsed:.1f} processed/s, "
                f"{max(failed - first[2], 0) / elapsed:.1f} failed/s")


def iterations(progress: dict[str, IterationState]) -> RenderableType:
    """The running iterable jobs: where each is (its cursor), items done, time per item."""
    from sidequest.cli.admin import render

    grid = render.table("JID", "CLASS", "CURSOR", "ITEMS", "PER ITEM", "SLICE", title="Iterations",
                        right=("ITEMS", "PER ITEM", "SLICE"))
    for jid, state in progress.items():
        per_item = f"{state.per_item * 1000:.2f} ms" if state.per_item is not None else ""
        render.row(grid, jid, state.klass, render.brief(state.cursor, 30), f"{state.items:,}", per_item,
                   state.executions)
    return grid


def section(grid: RenderableType, total: int, shown: int, noun: str, empty: str) -> list[RenderableType]:
    from rich.text import Text

    if total == 0:
        return [Text(empty, style="dim"), Text("")]
    more = [Text(f"... and {total - shown} more {noun}", style="dim")] if total > shown else []
    return [grid, *more, Text("")]


@main.command(cls=AdminCommand)
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.2),
              help="Seconds between frames.")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@redis_url_option
def top(interval: float, once: bool, redis_url: str | None) -> None:
    """A live view: totals and rates, queues, processes, running jobs; Ctrl-C quits.

    \b
    Examples:
      sidequest top
      sidequest top --once          # one frame, for a script or a log
    """
    from rich.live import Live

    from sidequest.cli.admin import render

    client = admin_client(redis_url)
    view = Top(client)
    out = render.console()
    if once:
        try:
            out.print(view.frame(strict=True))
        except redis.RedisError as exc:
            raise Unreachable(f"Redis failed mid-command: {reason(exc)}") from None
        return
    try:
        with Live(view.frame(), console=out, auto_refresh=False, redirect_stdout=False,
                  redirect_stderr=False) as live:
            while True:
                time.sleep(interval)
                live.update(view.frame(), refresh=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C: Live has restored the cursor; the last frame stays on screen
