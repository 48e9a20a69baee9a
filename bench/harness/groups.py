"""The group rows (issue 40): one group's jobs alone (`sidequest-open`), the same among held groups
(`sidequest-held`), and jobs spread over 1,000 groups (`sidequest-groups`); their throughput phase
only, with Redis's SLOWLOG read over it.

The held row's set-up runs before its jobs are pushed, on a clean Redis: a holder worker (the peer
file's BENCH_HOLDER: `sidequest worker --runner asyncio`, room for thousands of jobs in flight)
and the peer's `hold` command, which pushes the past groups, the groups at their concurrency (their
slot's job runs in the holder), out of their rate and paused, and makes the holder quiet
(bench/peers/sidequest_held.py). The holder lives until the row's worker has stopped, so the
groups at their concurrency stay held through the measured phase; its reserved jobs are not the
measured worker's, so the wait for the last acknowledgement passes over them.

SLOWLOG: `slowlog-log-slower-than` 10,000 µs (10 ms), reset right before the jobs appear (the
set-up's commands are not counted) and read once the last job is acknowledged; the harness's own
commands (its connection is named) are left out."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sidequest.store.keys import PROCESSES

from .peers import Peer
from .redisops import Counted
from .rows import GROUP_ROWS, GROUPS_ROW
from .tree import Tree

if TYPE_CHECKING:
    from .phases import Context

SLOWER_THAN_US = 10_000
SLOWLOG_LEN = 1024
HARNESS = "bench-harness"  # CLIENT SETNAME of the harness's connection: its commands are not the row's
HOLDER_ENV = (("BENCH_HOLDER", "1"), ("BENCH_ASYNC", "1"))
SHOWN = 5  # the longest commands kept per round


def base_id(ctx: Context) -> str:
    return ctx.peer.row.baseline_of or ctx.peer.row.id


def is_group_row(ctx: Context) -> bool:
    return base_id(ctx) in GROUP_ROWS


def jobs(ctx: Context) -> int:
    """The throughput phase's jobs: the open group's for the open and held rows, else the run's."""
    return ctx.settings.jobs if base_id(ctx) in (GROUPS_ROW,) or not is_group_row(ctx) else ctx.settings.group_jobs


@contextmanager
def held_back(ctx: Context) -> Iterator[bool]:
    """The held row's groups and its holder worker for the time of the block (True: set up, so the
    phase must not flush); other rows: nothing (False)."""
    if not ctx.peer.row.held:
        yield False
        return
    s, r = ctx.settings, ctx.r
    r.flushall()
    row = ctx.peer.row
    holder = Peer(replace(row, env=(*row.env, *HOLDER_ENV)), ctx.peer.python, ctx.peer.url, ctx.peer.log_dir)
    tree = Tree(holder.start_worker(0, ctx.name("holder")))
    try:
        tree.wait_idle(s.idle_timeout)
        began = time.monotonic()
        ctx.details["held_setup"] = holder.run("hold", "--count", str(s.past_groups), "--held", str(s.held_groups),
                                               name=ctx.name("hold"), timeout=3600)
        ctx.details["held_setup_s"] = round(time.monotonic() - began, 1)
        ctx.details["holders"] = [m.decode() for m in r.smembers(PROCESSES)]
        tree.check_alive("after the held groups' set-up")
        yield True
    finally:
        tree.proc.send_signal(signal.SIGKILL)  # its jobs sleep an hour: nothing to finish; FLUSHALL follows
        tree.stop(1.0)


def slowlog_reset(counted: Counted) -> None:
    counted.r.client_setname(HARNESS)
    counted.r.config_set("slowlog-log-slower-than", SLOWER_THAN_US)
    counted.r.config_set("slowlog-max-len", SLOWLOG_LEN)
    counted.r.slowlog_reset()
    counted.calls.update({"client|setname": 1, "config|set": 2, "slowlog|reset": 1})


def slowlog_read(ctx: Context) -> None:
    """The commands over 10 ms since the reset, but the harness's: their count and the longest."""
    entries = ctx.r.slowlog_get(SLOWLOG_LEN)
    ctx.counted.calls["slowlog|get"] += 1
    mine = [e for e in entries if text(e.get("client_name", b"")) != HARNESS]
    mine.sort(key=lambda e: -int(e["duration"]))
    ctx.figures["slow_commands"] = len(mine)
    ctx.figures["slowest_ms"] = int(mine[0]["duration"]) / 1000 if mine else 0.0
    ctx.details["slowest"] = [{"ms": int(e["duration"]) / 1000, "command": shown(e.get("command", b""))}
                              for e in mine[:SHOWN]]
    ctx.details["slowlog_harness"] = len(entries) - len(mine)


def shown(command: Any) -> str:
    """A slow command as SLOWLOG keeps it (Redis cuts long arguments), at most 160 characters."""
    found = text(command)
    return found if len(found) <= 160 else found[:157] + "..."


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def others_reserved(ctx: Context) -> tuple[str, ...]:
    """The holder's identities: its reserved lists stay full through the row (its BenchHold jobs)."""
    found: list[str] = ctx.details.get("holders", [])
    return tuple(found)
