"""Getting a unit of work: basic fetch (BRPOP, Sidekiq's) and reliable fetch (sidequest's default).

Queue order follows Sidekiq's `queues_cmd`: with no weights, queues are tried in the order
given (strict); with weights, each fetch shuffles a list holding each queue `weight` times,
so a queue comes first with probability proportional to its weight.

Basic fetch BRPOPs: a job lives only in the worker's memory while it runs, so `kill -9` loses it.
Reliable fetch moves the job atomically from its queue into `sidequest:reserved:<identity>`
and removes it only when the job is done, retried or dead; a process that dies leaves its jobs
there for `recovery` to put back. Every blocking call is bounded by `fetch_timeout`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis

from . import keys
from .config import Config
from .scripts import Scripts
from .tasks import TaskRecorder


class UnitOfWork:
    """One job taken from a queue. It owns its acknowledgement: the processor never touches keys."""

    __slots__ = ("queue", "raw", "_fetch", "done", "task_marked")

    def __init__(self, queue: str, raw: bytes, fetch: Fetch, task_marked: bool = False) -> None:
        self.queue = queue  # the queue name, without `queue:`
        self.raw = raw  # the payload exactly as it was in Redis
        self._fetch = fetch
        self.done = False
        self.task_marked = task_marked  # the fetch already marked its task event working

    def acknowledge(self, also: Callable[[Any], None] | None = None,
                    task: tuple[str, str] | None = None) -> None:
        """Finish the job; `also(pipe)` adds commands (a retry, a dead entry) to the same MULTI;
        `task` = (task id, jid) marks a task job's event finished with the acknowledgement."""
        if self.done:
            return
        self._fetch.acknowledge(self, also, task)
        self.done = True

    def requeue(self) -> bool:
        """Put the job back at the head of its queue, byte for byte as it was fetched.

        False if there was nothing to put back (the job had finished meanwhile)."""
        if self.done:
            return False
        moved = self._fetch.requeue(self)
        self.done = True
        return moved


class Fetch(Protocol):
    def retrieve_work(self) -> UnitOfWork | None: ...
    def acknowledge(self, unit: UnitOfWork, also: Callable[[Any], None] | None,
                    task: tuple[str, str] | None) -> None: ...
    def requeue(self, unit: UnitOfWork) -> bool: ...
    def flush(self) -> None: ...


class QueueOrder:
    """Sidekiq's queue ordering: strict as given, or a weighted shuffle per fetch."""

    def __init__(self, config: Config, rng: random.Random | None = None) -> None:
        self.strict = config.strict
        self.rng = rng or random.Random()
        self.keys = [keys.queue(name) for name in dict.fromkeys(config.queue_names)]
        self.weighted = [keys.queue(name) for name, weight in config.queues for _ in range(max(weight, 1))]

    def __call__(self) -> list[str]:
        if self.strict:
            return self.keys
        shuffled = self.weighted[:]
        self.rng.shuffle(shuffled)
        return list(dict.fromkeys(shuffled))


class BasicFetch:
    """Sidekiq's BasicFetch: BRPOP over the queues; at-most-once if the process is killed."""

    def __init__(self, config: Config, client: redis.Redis, rng: random.Random | None = None,
                 tasks: TaskRecorder | None = None) -> None:
        self.redis = client
        self.order = QueueOrder(config, rng)
        self.timeout = config.fetch_timeout
        self.tasks = tasks or TaskRecorder(client, config.task_retention)

    def retrieve_work(self) -> UnitOfWork | None:
        # BRPOP wakes at least every `timeout` seconds so the caller can notice a stop.
        got = self.redis.brpop(self.order(), timeout=self.timeout)
        if not got:
            return None
        key, raw = got
        return UnitOfWork(keys.queue_name(key.decode()), raw, self)

    def acknowledge(self, unit: UnitOfWork, also: Callable[[Any], None] | None,
                    task: tuple[str, str] | None) -> None:
        if task is not None:
            self.tasks.transition(task[0], task[1], "finished", "finished", finished_at=self.tasks.clock())
        if also is not None:
            pipe = self.redis.pipeline(transaction=True)
            also(pipe)
            pipe.execute()

    def flush(self) -> None:
        """Nothing is held back: BRPOP already removed the job."""

    def requeue(self, unit: UnitOfWork) -> bool:
        self.redis.rpush(keys.queue(unit.queue), unit.raw)
        return True


class ReliableFetch:
    """Jobs stay in a per-process reserved list until acknowledged (see module docstring)."""

    def __init__(self, config: Config, client: redis.Redis, identity: str,
                 rng: random.Random | None = None, slot: int = 0,
                 clock: Callable[[], float] = time.time) -> None:
        self.retention = int(config.task_retention)
        self.clock = clock
        self.redis = client
        self.order = QueueOrder(config, rng)
        self.timeout = config.fetch_timeout
        self.reserved = keys.reserved(identity)
        self.scripts = Scripts(client)
        self.slot = slot  # which queue this fetcher blocks on when all are empty
        # a finished job (raw, task id, jid) whose removal rides on the next fetch
        self.pending: tuple[bytes, str, str] | None = None

    def _ack_args(self) -> list[Any]:
        raw, task_id, jid = self.pending or (b"", "", "")
        return [raw, task_id, jid, self.clock(), self.retention]

    def retrieve_work(self) -> UnitOfWork | None:
        order = self.order()
        got = self.scripts.reserve(keys=[*order, self.reserved], args=self._ack_args())
        self.pending = None
        if got:
            key, raw, marked = got
            return UnitOfWork(keys.queue_name(key.decode()), raw, self, task_marked=bool(marked))
        # Nothing anywhere: block on one queue (each processor on a different one, so with
        # concurrency >= queue count every queue has a waiter). BLMOVE is atomic: the job is
        # in the reserved list the moment it leaves its queue. The other queues are checked
        # again after at most `timeout` seconds.
        key = order[self.slot % len(order)]
        raw = self.redis.blmove(key, self.reserved, self.timeout, "RIGHT", "LEFT")
        if raw is None:
            return None
        return UnitOfWork(keys.queue_name(key), raw, self)

    def acknowledge(self, unit: UnitOfWork, also: Callable[[Any], None] | None,
                    task: tuple[str, str] | None) -> None:
        """A success is removed (and its task event finished) by this processor's next fetch, in
        the same script, with no extra round trip; a failure with a retry or dead entry to write
        is acknowledged now, in one MULTI with those writes."""
        self.flush()
        if also is None:
            self.pending = (unit.raw, *(task or ("", "")))
            return
        pipe = self.redis.pipeline(transaction=True)
        also(pipe)
        pipe.lrem(self.reserved, -1, unit.raw)
        pipe.execute()

    def flush(self) -> None:
        """Acknowledge a finished job now rather than with the next fetch (before stopping)."""
        if self.pending is not None:
            self.scripts.acknowledge(keys=[self.reserved], args=self._ack_args())
            self.pending = None

    def requeue(self, unit: UnitOfWork) -> bool:
        """Moved only if still reserved (an acknowledgement may have removed it meanwhile)."""
        return bool(self.scripts.requeue(keys=[self.reserved, keys.queue(unit.queue)], args=[unit.raw]))


def build_fetch(config: Config, client: redis.Redis, identity: str, slot: int = 0,
                tasks: TaskRecorder | None = None) -> BasicFetch | ReliableFetch:
    if config.fetch == "basic":
        return BasicFetch(config, client, tasks=tasks)
    return ReliableFetch(config, client, identity, slot=slot)
