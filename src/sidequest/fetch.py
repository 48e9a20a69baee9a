"""Getting a unit of work: basic fetch (BRPOP, Sidekiq's) and reliable fetch (sidequest's default).

Queue order follows Sidekiq's `queues_cmd`: with no weights, queues are tried in the order
given (strict); with weights, each fetch shuffles a list holding each queue `weight` times,
so a queue comes first with probability proportional to its weight.

Basic fetch BRPOPs: a job lives only in the worker's memory while it runs, so `kill -9` loses it.
Reliable fetch moves the job atomically from its queue into this processor's own reserved list
`sidequest:reserved:<identity>:<slot>` and removes it only when its outcome is applied; a process
that dies leaves its jobs there for `recovery` to put back. Every blocking call is bounded by
`fetch_timeout`.

The unit of work owns the job's end: `apply(outcome)` writes it in one script that first removes
the reserved copy, and writes nothing if that copy is gone (another process recovered the job
while this one was paused: its copy is the live one). A success is applied lazily: its removal
rides on the processor's next fetch, so a busy worker makes one round trip per job.

Commands are never re-sent by the Redis client (see `connection`): if a fetch's reply is lost,
the job may be in our list without us knowing. Because the list is this processor's alone, the
next fetch after such an error reads it back and adopts whatever it holds besides the success it
was acknowledging, so the job runs instead of waiting for recovery.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

import redis

from . import keys
from .config import Config
from .lifecycle import has_ops
from .outcome import Outcome
from .payload import decode
from .scripts import Scripts


class UnitOfWork:
    """One job taken from a queue. It owns its end: the processor never touches keys."""

    __slots__ = ("_fetch", "_lock", "done", "queue", "raw")

    def __init__(self, queue: str, raw: bytes, fetch: Fetch) -> None:
        self.queue = queue  # the queue name, without `queue:`
        self.raw = raw  # the payload exactly as it was in Redis
        self._fetch = fetch
        self._lock = threading.Lock()  # a shutdown's put-back and the processor's own outcome
        self.done = False

    def taken(self, ops: list[Any]) -> bool:
        """Run the features' `taken` operations, if any; False if the job is no longer ours."""
        return not has_ops(ops) or self._fetch.mark(self, ops)

    def apply(self, outcome: Outcome, ops: list[Any]) -> bool:
        """Write `outcome` (with the features' operations) atomically. False if the job was no
        longer held by this processor, in which case nothing was written."""
        with self._lock:  # one outcome per unit, even under basic fetch (no reserved copy to check)
            if self.done:
                return False
            applied = self._fetch.apply(self, outcome, ops)
            self.done = True
            return applied

    def put_back(self, ops: list[Any]) -> bool:
        """Put the job back at the head of its queue, byte for byte as it was fetched.

        False if there was nothing to put back (its outcome was applied meanwhile)."""
        return self.apply(Outcome.put_back(), ops)


class Fetch(Protocol):
    def retrieve_work(self) -> UnitOfWork | None: ...
    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool: ...
    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool: ...
    def flush(self) -> None: ...
    def lost_reply(self) -> None: ...


class PausedQueues:
    """The names in `sidequest:paused`, read at most once a second for a whole process, so a
    paused queue is skipped by every worker within about a second (see `blocking_timeout`)."""

    def __init__(self, client: redis.Redis, every: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = client
        self.every = every
        self.clock = clock
        self._names: frozenset[str] = frozenset()
        self._until = 0.0
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        if self.clock() >= self._until:
            with self._lock:
                if self.clock() >= self._until:
                    self._names = frozenset(n.decode() for n in cast("set[bytes]", self.redis.smembers(keys.PAUSED)))
                    self._until = self.clock() + self.every
        return self._names


class QueueOrder:
    """Sidekiq's queue ordering: strict as given, or a weighted shuffle per fetch; paused
    queues are left out."""

    def __init__(self, config: Config, rng: random.Random | None = None,
                 paused: PausedQueues | None = None) -> None:
        self.strict = config.strict
        self.rng = rng or random.Random()
        self.paused = paused
        self.keys = [keys.queue(name) for name in dict.fromkeys(config.queue_names)]
        self.weighted = [keys.queue(name) for name, weight in config.queues for _ in range(max(weight, 1))]

    def __call__(self) -> list[str]:
        if self.strict:
            order = self.keys
        else:
            shuffled = self.weighted[:]
            self.rng.shuffle(shuffled)
            order = list(dict.fromkeys(shuffled))
        paused = self.paused.names() if self.paused is not None else frozenset()
        return [key for key in order if keys.queue_name(key) not in paused] if paused else order


def blocking_timeout(config: Config) -> float:
    """How long an idle fetch blocks: `fetch_timeout`, at most 1 s, so a pause takes effect
    within about a second even for a fetch already blocked on that queue."""
    return min(config.fetch_timeout, 1.0)


def wait_paused(seconds: float) -> None:
    """Every queue of this worker is paused: idle for a bounded time, then look again."""
    time.sleep(seconds)


class _Settler:
    """Writes outcomes through the SETTLE script (shared by both fetches)."""

    def __init__(self, config: Config, client: redis.Redis, scripts: Scripts, reserved: str | None,
                 clock: Callable[[], float]) -> None:
        self.config = config
        self.redis = client
        self.scripts = scripts
        self.reserved = reserved  # None: basic fetch holds no reserved copy to check
        self.clock = clock

    def settle(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        mode, dest, point = {
            "done": ("ack", keys.QUEUES, "finished"),
            "retry": ("retry", keys.RETRY, "retried"),
            "dead": ("dead", keys.DEAD, "dead"),
            "dropped": ("ack", keys.QUEUES, "dropped"),
            "put_back": ("queue", keys.queue(unit.queue), "put_back"),
            "snoozed": ("snooze", keys.SCHEDULE, "snoozed"),
            "cancelled": ("ack", keys.QUEUES, "cancelled"),
        }[outcome.kind]
        blob = unit.raw if outcome.kind == "put_back" else (outcome.blob or b"")
        now = self.clock()
        checked = "0" if self.reserved is None else "1"
        return self._run(checked, unit.raw, mode, dest, blob, outcome.at or now, unit.queue, now, point, ops)

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        checked = "0" if self.reserved is None else "1"
        now = self.clock()
        return self._run(checked, unit.raw, "taken", keys.QUEUES, b"", now, unit.queue, now, "taken", ops)

    def _run(self, checked: str, raw: bytes, mode: str, dest: str, blob: bytes | str, score: float,
             queue: str, now: float, point: str, ops: list[Any]) -> bool:
        """True when the outcome is written (now, or by an earlier attempt whose reply was lost)."""
        cutoff = now - self.config.dead_timeout
        return bool(self.scripts.settle(
            keys=[self.reserved or keys.QUEUES, dest],
            args=[checked, raw, mode, blob, score, queue, cutoff, self.config.dead_max_jobs, now, point, *ops],
            client=self.redis))


class BasicFetch:
    """Sidekiq's BasicFetch: BRPOP over the queues; at-most-once if the process is killed."""

    def __init__(self, config: Config, client: redis.Redis, scripts: Scripts,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.time,
                 paused: PausedQueues | None = None) -> None:
        self.redis = client
        self.order = QueueOrder(config, rng, paused)
        self.timeout = blocking_timeout(config)
        self.settler = _Settler(config, client, scripts, None, clock)

    def retrieve_work(self) -> UnitOfWork | None:
        order = self.order()
        if not order:
            wait_paused(self.timeout)
            return None
        # BRPOP wakes at least every `timeout` seconds so the caller can notice a stop.
        got = self.redis.brpop(order, timeout=self.timeout)
        if not got:
            return None
        key, raw = cast("tuple[bytes, bytes]", got)
        return UnitOfWork(keys.queue_name(key.decode()), raw, self)

    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        if outcome.kind in ("done", "dropped", "cancelled") and not has_ops(ops):
            return True  # BRPOP already removed it: nothing to write
        return self.settler.settle(unit, outcome, ops)

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        return self.settler.mark(unit, ops)

    def flush(self) -> None:
        """Nothing is held back."""

    def lost_reply(self) -> None:
        """A lost BRPOP reply loses that job: basic fetch is at-most-once by design."""


class ReliableFetch:
    """Jobs stay in this processor's reserved list until their outcome is applied (see module)."""

    def __init__(self, config: Config, client: redis.Redis, identity: str, scripts: Scripts,
                 rng: random.Random | None = None, slot: int = 0,
                 clock: Callable[[], float] = time.time, paused: PausedQueues | None = None) -> None:
        self.clock = clock
        self.redis = client
        self.order = QueueOrder(config, rng, paused)
        self.timeout = blocking_timeout(config)
        self.reserved = keys.reserved(identity, slot)
        self.scripts = scripts
        self.settler = _Settler(config, client, scripts, self.reserved, clock)
        self.slot = slot  # which queue this fetcher blocks on when all are empty
        # a finished job (raw, its 'finished' ops) whose removal rides on the next fetch
        self.pending: tuple[bytes, list[Any]] | None = None
        self._suspect = False  # a call's reply was lost: our list may hold a job we do not know

    def retrieve_work(self) -> UnitOfWork | None:
        if self._suspect:
            adopted = self._reconcile()
            if adopted is not None:
                return adopted
        order = self.order()
        raw_prev, ops = self.pending or (b"", [0])
        got = self.scripts.reserve(keys=[*order, self.reserved, keys.RESERVATIONS],
                                   args=[raw_prev, self.clock(), *ops], client=self.redis)
        self.pending = None
        if got:
            key, raw = got
            return UnitOfWork(keys.queue_name(key.decode()), raw, self)
        # Nothing anywhere: block on one queue (each processor on a different one, so with
        # concurrency >= queue count every queue has a waiter). BLMOVE is atomic: the job is
        # in the reserved list the moment it leaves its queue. The other queues are checked
        # again after at most `timeout` seconds.
        if not order:
            wait_paused(self.timeout)
            return None
        key = order[self.slot % len(order)]
        # redis-py types the timeout as int; BLMOVE takes fractional seconds
        moved = self.redis.blmove(key, self.reserved, self.timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]
        raw = cast("bytes | None", moved)
        if raw is None:
            return None
        return UnitOfWork(keys.queue_name(key), raw, self)

    def lost_reply(self) -> None:
        """A call to Redis failed without a reply: check our list before the next fetch."""
        self._suspect = True

    def _reconcile(self) -> UnitOfWork | None:
        """Adopt a job that is in our list though no fetch returned it (its reply was lost)."""
        held = cast("list[bytes]", self.redis.lrange(self.reserved, 0, -1))
        pending = self.pending[0] if self.pending else None
        unknown = [raw for raw in held if raw != pending]
        self._suspect = len(unknown) > 1  # one at a time; look again next fetch
        if not unknown:
            return None
        raw = unknown[-1]  # the oldest (LPUSH puts the newest first)
        try:
            queue = decode(raw).get("queue")
        except ValueError:
            queue = None
        return UnitOfWork(queue if isinstance(queue, str) else "default", raw, self)

    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        """A success is removed by this processor's next fetch, in the same script (its ops
        with it); any other outcome is applied now, with the pending success flushed first."""
        self.flush()
        if outcome.kind == "done":
            self.pending = (unit.raw, ops)
            return True
        return self.settler.settle(unit, outcome, ops)

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        return self.settler.mark(unit, ops)

    def flush(self) -> None:
        """Apply a finished job now rather than with the next fetch (before waiting or stopping)."""
        if self.pending is not None:
            self.settler.settle(UnitOfWork("", self.pending[0], self), Outcome.done(), self.pending[1])
            self.pending = None


def build_fetch(config: Config, client: redis.Redis, identity: str, scripts: Scripts,
                slot: int = 0, paused: PausedQueues | None = None) -> BasicFetch | ReliableFetch:
    if config.fetch == "basic":
        return BasicFetch(config, client, scripts, paused=paused)
    return ReliableFetch(config, client, identity, scripts, slot=slot, paused=paused)
