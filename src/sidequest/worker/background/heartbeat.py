"""Process registration and stats, in the keys Sidekiq's API and Web UI read.

Every `heartbeat_interval` seconds, one MULTI: add the counts since the last beat (`counters`)
to `stat:processed`/`stat:failed` and today's keys; add what the launcher's `flushes` queue (the
per-job metrics, known here only as a call: the heartbeat never names a feature); rewrite the
`<identity>:work` hash (and its Sidekiq 6 twin `<identity>:workers`) with the running jobs;
`SADD processes`; write the `<identity>` hash (`info`, `busy`, `beat`, `quiet`, `rss`); expire
everything after `heartbeat_ttl`; and pop one remote signal from `<identity>-signals` (Sidekiq's
Web UI and API write TSTP/USR1 for quiet, TERM for stop, TTIN to dump thread stacks). A remote
signal calls the launcher's own method: no OS signal is sent, so a worker embedded in an
application stops or quiets itself, never the application. A process that vanishes disappears from Redis by
itself; a clean stop removes its entries at once. A failed beat is a warning, once per outage.
`registered` is set by the first beat that reaches Redis: the launcher fetches no job before it,
since until then another process's recovery would count this one as dead and take its jobs.
Until it is set, beats are tried every `UNREGISTERED_RETRY` seconds. Each beat that reaches
Redis renews the process's `Lease`: how long its jobs are surely still its own.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis

from sidequest.config import Config
from sidequest.store import keys
from sidequest.store.outage import RedisOutage
from sidequest.worker.background.loop import Background
from sidequest.worker.counters import ProcessCounters

log = logging.getLogger(__name__)

UNREGISTERED_RETRY = 0.5  # seconds between beats while the first has not reached Redis
STATS_TTL = 5 * 365 * 24 * 3600  # daily stat keys live five years, as Sidekiq's
# Remote signal names (Sidekiq's) -> the command they ask of the launcher.
REMOTE_SIGNALS = {"TSTP": "quiet", "USR1": "quiet", "TERM": "stop", "INT": "stop", "TTIN": "dump"}
# A part that writes with each beat, in the beat's own MULTI: it queues its commands on the
# pipeline it is given and returns what puts its counts back, to go out with the next beat, should
# that MULTI fail (`JobMetricsFeature.flush` is one).
Flush = Callable[[Any], Callable[[], None]]
# A lease ends this share of `heartbeat_ttl` before the hash can expire: Redis counts the TTL on
# its own clock, which may run a little faster than this machine's.
LEASE_MARGIN = 0.02


class Lease:
    """How long the jobs in this process's reserved lists are surely still its own.

    Recovery takes a process's jobs only while its heartbeat hash is missing. Each beat that
    reaches Redis makes the hash live `heartbeat_ttl` from the moment the beat was sent at the
    latest, so the hash has lived without a gap since the beat that followed the last possible
    gap: a job that entered our lists after that (`since`), checked before the hash can expire
    (`until`), cannot have been recovered. Two float reads, no round trip: a hub checks it
    before handing out a job it kept in hand (`batch.BatchList`). Never renewed, it holds nothing.
    (In Cluster mode recovery reads the hash just before a list, not in the move's script: a
    job taken in between may still be recovered, and run once more at most, see `recovery`.)"""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl * (1 - LEASE_MARGIN)
        self._lock = threading.Lock()
        # (since, until), monotonic: replaced whole, so a reader without the lock sees one pair
        self.span = (float("inf"), float("-inf"))

    def renewed(self, sent: float, answered: float) -> None:
        """A beat sent at `sent` reached Redis by `answered` (monotonic)."""
        with self._lock:
            since, until = self.span
            if answered >= until:  # it may have written the hash after it expired (any time up to `answered`)
                since = answered
            self.span = (since, max(until, sent + self.ttl))

    def end(self) -> None:
        """The hash is deleted (a clean stop): nothing is surely ours any more."""
        with self._lock:
            self.span = (float("inf"), float("-inf"))

    def holds(self, since: float, now: float) -> bool:
        """True if what entered our lists at `since` (monotonic) is surely still ours `now`."""
        start, until = self.span
        return start <= since and now < until


def make_identity(nonce: str, hostname: str | None = None, pid: int | None = None) -> str:
    """`hostname:pid:nonce`, Sidekiq's identity shape (`hostname`: the machine's name unless set,
    as Sidekiq takes $DYNO on Heroku; `pid`: this process's unless given, as a supervisor gives
    its child's)."""
    return f"{hostname or socket.gethostname()}:{os.getpid() if pid is None else pid}:{nonce}"


def forget(pipe: Any, identity: str) -> None:
    """Queue on `pipe` the removal of a process's entries: at its clean stop, or by the
    supervisor that saw it die (see `supervisor`)."""
    pipe.srem(keys.PROCESSES, identity)
    for key in (keys.process(identity), keys.work(identity), keys.workers(identity), keys.signals(identity)):
        pipe.unlink(key)


def rss_kb() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def capsule_info(config: Config) -> dict[str, dict[str, Any]]:
    """The `capsules` of the process's `info`, as Sidekiq 7 and 8 write them: each capsule's
    concurrency, mode (strict: no weights; random: every weight 1; else weighted) and weights
    (queue -> weight). The top-level `queues`, `weights` (one mapping per capsule) and
    `concurrency` (their total), which Sidekiq 6 reads too, are derived from them."""
    groups = [("default", config.queues, config.concurrency),
              *((c.name, c.weighted, c.concurrency) for c in config.capsules)]
    info: dict[str, dict[str, Any]] = {}
    for name, queues, concurrency in groups:
        weights = dict(queues)
        mode = ("strict" if all(w == 0 for w in weights.values())
                else "random" if all(w == 1 for w in weights.values()) else "weighted")
        info[name] = {"concurrency": concurrency, "mode": mode, "weights": weights}
    return info


class PartlyWritten(redis.RedisError):
    """The beat's MULTI ran but Redis refused some of its commands (WRONGTYPE, an ACL): the
    beat failed, yet its counts were written and must not be given back."""


class Heartbeat:
    def __init__(self, config: Config, client: redis.Redis, identity: str, counters: ProcessCounters,
                 version: str, commands: dict[str, Callable[[], None]] | None = None,
                 extra: list[Callable[[], None]] | None = None, flushes: list[Flush] | None = None,
                 outage: RedisOutage | None = None) -> None:
        self.config = config
        self.outage = outage  # told of each beat that reaches Redis: busy processors may fetch nothing
        self.redis = client
        self.identity = identity
        self.counters = counters
        self.quiet = False
        self.commands = commands or {}  # "quiet" | "stop" | "dump" -> the launcher's method
        self.extra = extra or []  # other periodic duties (limits)
        self.flushes = flushes or []  # other counts written with each beat (per-job metrics)
        self._failing = False
        capsules = capsule_info(config)
        self.info = json.dumps({
            "hostname": config.hostname or socket.gethostname(), "started_at": time.time(), "pid": os.getpid(),
            "tag": config.tag, "concurrency": config.total_concurrency,
            "capsules": capsules,
            "queues": list(dict.fromkeys(name for c in capsules.values() for name in c["weights"])),
            "weights": [c["weights"] for c in capsules.values()],
            "labels": list(config.labels), "identity": identity, "version": version,
            "embedded": False,
        }, separators=(",", ":"))
        # beat() deals with Redis errors itself; the loop keeps beating whatever else a pass raises
        self.background = Background("sidequest-heartbeat", self._pass, what="heartbeat", retry=self._interval,
                                     outage=())
        self.registered = threading.Event()  # set once a beat has reached Redis
        self.lease = Lease(config.heartbeat_ttl)  # renewed by each beat that reaches Redis
        # one MULTI; on a Redis Cluster its keys are in several slots, so a pipeline (each write
        # stands alone: a beat is the same whether it is written in one step or several)
        self.atomic = not keys.space(client).cluster

    def start(self) -> None:
        self.beat()
        self.background.start(delay=self._interval())

    def _interval(self) -> float:
        if self.registered.is_set():
            return self.config.heartbeat_interval
        return min(self.config.heartbeat_interval, UNREGISTERED_RETRY)

    def _pass(self) -> float:
        self.beat()
        for duty in self.extra:
            try:
                duty()
            except Exception:  # thread boundary: a failed duty must not stop the beats
                log.exception("heartbeat duty failed")
        return self._interval()

    def beat(self) -> None:
        processed, failed = self.counters.processed.reset(), self.counters.failed.reset()
        give_back: list[Callable[[], None]] = []
        began = time.monotonic()
        try:
            self._write(processed, failed, give_back)
        except (redis.RedisError, OSError) as exc:
            if not isinstance(exc, PartlyWritten):
                # don't lose the counts: they go out with the next beat that reaches Redis
                self.counters.processed.incr(processed)
                self.counters.failed.incr(failed)
                for undo in give_back:
                    undo()
            if not self._failing:
                log.warning("heartbeat failed (%s); past heartbeat_ttl (%.0f s) other processes will "
                            "count this one as dead and recover its jobs", exc, self.config.heartbeat_ttl)
            self._failing = True
            return
        self.lease.renewed(began, time.monotonic())
        if self.outage is not None:
            self.outage.up(began)
        if self._failing:
            log.warning("heartbeat written again")
            self._failing = False
        self.registered.set()
        self.counters.flushed += processed

    def _write(self, processed: int, failed: int, give_back: list[Callable[[], None]]) -> None:
        # milliseconds: a fractional TTL (1.5 s) must not be cut to whole seconds, or the hash
        # could expire before the next beat and recovery would take a live process's jobs
        ttl_ms = max(int(self.config.heartbeat_ttl * 1000), 1)
        work = self.counters.work.snapshot()
        pipe = self.redis.pipeline(transaction=self.atomic)
        self._count(pipe, processed, failed)
        give_back.extend(flush(pipe) for flush in self.flushes)
        for work_key in (keys.work(self.identity), keys.workers(self.identity)):
            pipe.unlink(work_key)
            if work:
                pipe.hset(work_key, mapping={tid: json.dumps(entry, separators=(",", ":"))
                                             for tid, entry in work.items()})
                pipe.pexpire(work_key, ttl_ms)
        pipe.sadd(keys.PROCESSES, self.identity)
        pipe.hset(keys.process(self.identity), mapping={
            "info": self.info, "busy": len(work), "beat": time.time(),
            "quiet": "true" if self.quiet else "false", "rss": rss_kb(), "rtt_us": 0,
            "concurrency": self.config.total_concurrency,  # Sidekiq 8.1.2+ reads it here, not from info
        })
        pipe.pexpire(keys.process(self.identity), ttl_ms)
        pipe.rpop(keys.signals(self.identity))
        replies = pipe.execute(raise_on_error=False)
        refused = [reply for reply in replies if isinstance(reply, Exception)]
        if refused:  # the MULTI ran: the counts are in, only the refused commands are not
            raise PartlyWritten(f"the heartbeat was refused in part: {refused[0]}")
        remote: Any = replies[-1]
        if remote:
            name = remote.decode() if isinstance(remote, bytes) else str(remote)
            command = self.commands.get(REMOTE_SIGNALS.get(name.upper(), ""))
            if command is None:
                log.warning("ignoring unknown remote signal %r", name)
            else:
                log.info("remote signal %s received", name)
                command()

    @staticmethod
    def _count(pipe: Any, processed: int, failed: int) -> None:
        """Add counts to the totals and today's keys (which expire, as Sidekiq's do)."""
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        for name, count, total in (("processed", processed, keys.STAT_PROCESSED),
                                   ("failed", failed, keys.STAT_FAILED)):
            if count:
                daily = keys.stat_daily(name, day)
                pipe.incrby(total, count)
                pipe.incrby(daily, count)
                pipe.expire(daily, STATS_TTL)

    def stop(self) -> bool:
        """Stop beating, flush the last counts, and remove this process's entries; whether that
        reached Redis (the process's last call: the stop's word on whether Redis answers)."""
        self.background.stop()
        self.lease.end()
        processed, failed = self.counters.processed.reset(), self.counters.failed.reset()
        try:
            pipe = self.redis.pipeline(transaction=self.atomic)
            self._count(pipe, processed, failed)
            for flush in self.flushes:
                flush(pipe)  # the last beat: nothing to give back to
            forget(pipe, self.identity)
            pipe.execute()
        except (redis.RedisError, OSError) as exc:
            log.warning("could not clear this process from Redis (%s); it expires in %.0f s",
                        exc, self.config.heartbeat_ttl)
            return False
        return True
