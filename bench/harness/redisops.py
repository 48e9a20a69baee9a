"""The harness's own Redis work: hiding the staged jobs and showing them all at once, waiting for
the last job, reading INFO commandstats, collecting stamps, and the ceiling redis-benchmark
measures on the same server. (The same over a Redis Cluster: harness/cluster.py.)

Between CONFIG RESETSTAT and INFO commandstats (the throughput window) every command the
harness sends goes through `Counted`, which counts it, so that it can be taken out of the
peer's commands per job; the connection is opened before the window (no handshake inside it)."""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter

import redis

from sidequest.store.keys import DEFAULT, Keyspace

from .peers import PhaseError
from .tree import Tree

LAST, FIRST, COUNT, STAMPS = "bench:last", "bench:first", "bench:count", "bench:stamps"
ASIDE = "bench:aside:"


class Counted:
    """A Redis connection whose commands are counted by name (as INFO commandstats names them),
    on the server(s) whose processes are `pids` (their CPU time is the Redis CPU of a job)."""

    keys: Keyspace = DEFAULT  # where sidequest's keys live on this Redis (Sidekiq's layout)
    not_lists: frozenset[str] = frozenset()  # the staged keys that hold no list (`aside`)

    def __init__(self, url: str, pids: tuple[int, ...]) -> None:
        self.r = redis.Redis.from_url(url)
        self.r.ping()
        self.pids = pids
        self.calls: Counter[str] = Counter()

    def reset_stats(self) -> None:
        self.calls.clear()
        self.r.config_resetstat()
        self.calls["config|resetstat"] += 1  # counted by Redis after the reset

    def aside(self, keys: list[str]) -> list[str]:
        """Rename the staged keys out of the peer's sight (not counted: before the window). Grouped
        jobs (the fairness row) wait in sets and hashes too: only lists are waited on to empty."""
        present = [key for key in keys if self.r.exists(key)]
        if not present:
            raise PhaseError(f"none of the staged keys {keys} exists after the enqueue")
        pipe = self.r.pipeline(transaction=True)
        for key in present:
            pipe.type(key)
            pipe.rename(key, ASIDE + key)
        kinds = pipe.execute()[::2]
        self.not_lists = frozenset(key for key, kind in zip(present, kinds, strict=True)
                                   if kind not in (b"list", "list"))
        return present

    def back(self, keys: list[str]) -> None:
        """Rename them back in one MULTI/EXEC: every job appears at once."""
        pipe = self.r.pipeline(transaction=True)
        for key in keys:
            pipe.rename(ASIDE + key, key)
        pipe.execute()
        self.calls.update({"multi": 1, "exec": 1, "rename": len(keys)})

    def wait_last(self, tree: Tree, timeout: float) -> float:
        """BLPOP bench:last (1 s at a time, checking the worker lives); its value, the last job's end."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.r.blpop([LAST], timeout=1)
            self.calls["blpop"] += 1
            if got is not None:
                return float(got[1])
            tree.check_alive("before the last job ran")
            if time.monotonic() > deadline:
                raise PhaseError(f"the last job did not run within {timeout:.0f} s (count={self.r.get(COUNT)})")

    def wait_sidequest_acked(self, queues: list[str], others: tuple[str, ...] = (), timeout: float = 60) -> float:
        """sidequest's reliable fetch: done once the queues (their keys) and every reserved list
        but those of the identities in `others` are empty (the last acknowledgement is in). Polls
        every millisecond; returns the wall time it saw that."""
        deadline = time.monotonic() + timeout
        while True:
            pipe = self.r.pipeline(transaction=False)
            lists = [key for key in queues if key not in self.not_lists]
            for key in lists:
                pipe.llen(key)
            pipe.keys(self.keys.reserved("*", "*", "*"))
            *waiting, found = pipe.execute()
            reserved = [key for key in found if not any(name.encode() in key for name in others)]
            self.calls.update({"llen": len(lists), "keys": 1})
            if not any(waiting) and not reserved:
                return time.time()
            if time.monotonic() > deadline:
                raise PhaseError(f"jobs still unacknowledged after {timeout:.0f} s: {reserved}")
            time.sleep(0.001)

    def commandstats(self) -> dict[str, int]:
        """Calls per command since the reset, less the harness's own (INFO omits itself)."""
        stats = self.r.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
        for name, count in self.calls.items():
            calls[name] = calls.get(name, 0) - count
        return {name: count for name, count in sorted(calls.items(), key=lambda kv: -kv[1]) if count}


def collect_stamps(r: redis.Redis, count: int, deadline: float) -> list[tuple[float, float]]:
    """Up to `count` (sent-or-due, started) pairs from bench:stamps, waiting until `deadline` (monotonic)."""
    found: list[tuple[float, float]] = []
    while len(found) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        got = r.blpop([STAMPS], timeout=max(0.01, min(left, 1.0)))
        if got is not None:
            sent, started = (float(x) for x in got[1].split())
            found.append((sent, started))
    return found


CEILING_LINE = re.compile(r"^(.+?): ([\d.]+) requests per second(?:, p50=([\d.]+) msec)?")


def ceiling(r: redis.Redis, port: int, requests: int) -> dict[str, object]:
    """Requests/s of INCR, LPUSH, RPOP and an EVALSHA (a one-INCR Lua script) from redis-benchmark
    (50 clients, no pipelining: its defaults) against the benchmark's own redis-server."""
    sha = r.script_load("return redis.call('incr', KEYS[1])")
    base = ["redis-benchmark", "-p", str(port), "-q", "-n", str(requests)]
    found: dict[str, object] = {"requests": requests, "clients": 50}
    for argv in ([*base, "-t", "incr,lpush,rpop"], [*base, "evalsha", sha, "1", "bench:ceiling"]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=300).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            found["error"] = str(exc)
            continue
        for line in re.split(r"[\r\n]+", out):
            match = CEILING_LINE.match(line.strip())
            if match and "rps=" not in line:
                name = "EVALSHA" if match.group(1).lower().startswith("evalsha") else match.group(1)
                found[name] = float(match.group(2))
    r.flushall()
    return found
