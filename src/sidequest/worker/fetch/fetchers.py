"""Getting a unit of work: basic fetch (BRPOP, Sidekiq's) and reliable fetch (sidequest's default).

Basic fetch BRPOPs: a job lives only in the worker's memory while it runs, so `kill -9` loses it.

Reliable fetch moves jobs atomically into reserved lists, in batches for a process's processors
(its `batch.BatchList`: the batch list, the jobs in hand, the acknowledger), or, when every queue is
empty, with a BLMOVE of one processor into a list of its own. Queue order is `queue_order`'s.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, cast

import redis

from sidequest.config import Config
from sidequest.store import keys
from sidequest.store.direct import direct_path_for
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.batch import BatchList, Waiter
from sidequest.worker.fetch.queue_order import (
    PausedQueues,
    QueueOrder,
    blocking_timeout,
    blocking_wait,
    wait_paused,
)
from sidequest.worker.fetch.reserve import queue_of_raw
from sidequest.worker.fetch.unit import Fetch, Settler, UnitOfWork
from sidequest.worker.lifecycle import has_ops
from sidequest.worker.outcome import Outcome

__all__ = ["BasicFetch", "BatchList", "Fetch", "PausedQueues", "QueueOrder", "ReliableFetch", "UnitOfWork",
           "build_fetch"]


class BasicFetch:
    """Sidekiq's BasicFetch: BRPOP over the queues; at-most-once if the process is killed."""

    def __init__(self, config: Config, client: redis.Redis, scripts: Scripts,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.time,
                 paused: PausedQueues | None = None) -> None:
        self.redis = client
        self.keys = scripts.keys
        self.order = QueueOrder(config, rng, paused, self.keys)
        self.timeout = blocking_timeout(config)
        self.rng = rng or random.Random()  # spreads the blocking fetches' timeouts (`blocking_wait`)
        self.settler = Settler(config, client, scripts, clock)
        self.reserved: str | None = None
        self.answered = True

    def retrieve_work(self) -> UnitOfWork | None:
        order = self.order()
        if not order:
            wait_paused(self.timeout)
            return None
        # BRPOP wakes at least every `timeout` seconds so the caller can notice a stop.
        got = self.redis.brpop(order, timeout=blocking_wait(self.timeout, self.rng))
        if not got:
            return None
        key, raw = cast("tuple[bytes, bytes]", got)
        return UnitOfWork(self.keys.queue_name(key.decode()), raw, self)

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

    def hand_back(self) -> None:
        """Nothing is held that does not run."""

    def release(self) -> None:
        """Nothing was taken for others."""


class ReliableFetch:
    """One processor's side of its process's `BatchList`, plus its own list for blocking fetches."""

    def __init__(self, config: Config, client: redis.Redis, identity: str, scripts: Scripts,
                 rng: random.Random | None = None, slot: int = 0,
                 clock: Callable[[], float] = time.time, paused: PausedQueues | None = None,
                 hub: BatchList | None = None) -> None:
        self.redis = client
        self.hub = hub or BatchList(config, identity, scripts, rng, clock, paused, client=client)
        self.reserved: str | None = self.hub.reserved
        self.keys = scripts.keys
        self.identity = identity
        self.own = keys.reserved(identity, slot)  # in Cluster mode, one per queue: `keys.reserved(..., queue)`
        self.slot = slot  # which queue this processor blocks on when all are empty
        # blocking fetches that timed out, when there are fewer processors than queues: the waiters rotate
        self._turn = 0
        self._rotates = config.concurrency < len(self.hub.order.keys)
        self.timeout = self.hub.timeout
        self.rng = rng or random.Random()  # spreads the blocking fetches' timeouts (`blocking_wait`)
        self.lane = direct_path_for(client)  # the batch calls, sent directly (see `store.direct`)
        self.settler = Settler(config, client, scripts, clock, self.lane)
        self.waiter = Waiter()
        self._suspect = False  # a call's reply was lost: our own list may hold a job we do not know
        self.answered = True

    def retrieve_work(self) -> UnitOfWork | None:
        self.answered = True
        if self._suspect:
            adopted = self._reconcile()
            if adopted is not None:
                return adopted
        taken, order = self.hub.take(self.lane, self.redis, self.slot if self.keys.cluster else self.own,
                                     self.waiter)
        if taken is not None:
            queue = self.keys.queue_name(taken[0])
            return UnitOfWork(queue, taken[1], self, self.hub.batch_of(queue) if self.keys.cluster else self.reserved)
        if order is None:  # waited on another processor's fetch, which had nothing for us
            self.answered = False
            return None
        if not order:
            wait_paused(self.timeout)
            return None
        # Nothing anywhere: block on one queue (each processor on a different one, so with
        # concurrency >= queue count every queue has a waiter; with fewer, the waiters move one
        # queue on at each timeout, so every queue is watched in turn). BLMOVE is atomic: the job
        # is in our own list the moment it leaves its queue.
        spread = self.hub.order.spread() or order
        key = spread[(self.slot + self._turn) % len(spread)]
        queue = self.keys.queue_name(key)
        if self.keys.cluster:  # our own list in that queue's slot (RESERVE registered it)
            self.own = self.keys.reserved(self.identity, self.slot, queue)
        # redis-py types the timeout as int; BLMOVE takes fractional seconds
        try:
            raw = cast("bytes | None", self.redis.blmove(key, self.own, blocking_wait(self.timeout, self.rng),  # type: ignore[arg-type]
                                                         "RIGHT", "LEFT"))
        except redis.ResponseError as exc:
            if not self.hub.ledger.blocking_fault(key, exc):  # that queue's fault, not an outage
                raise
            self._turn += self._rotates  # as after a timeout
            wait_paused(self.timeout)  # as long as a wait on it would take: no spin if it is the only queue
            return None
        if raw is None:
            self._turn += self._rotates
            return None
        return UnitOfWork(queue, raw, self, self.own)

    def _reconcile(self) -> UnitOfWork | None:
        """Adopt a job in our own list though no fetch returned it (its reply was lost)."""
        held = cast("list[bytes]", self.redis.lrange(self.own, 0, -1))
        self._suspect = len(held) > 1  # one at a time; look again next fetch
        if not held:
            return None
        queue = (cast("keys.ClusterKeyspace", self.keys).queue_of_reserved(self.own) if self.keys.cluster
                 else queue_of_raw(held[-1]))
        return UnitOfWork(queue, held[-1], self, self.own)

    def lost_reply(self) -> None:
        """A call to Redis failed without a reply: check our lists before the next fetch."""
        self._suspect = True
        self.hub.lost_reply()

    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        """A success from the batch list is removed within the hub's window (its ops with it);
        anything else is applied now."""
        held = self.hub.holds(unit.home)
        if outcome.kind == "done" and held:
            self.hub.acknowledge(unit.raw, ops, unit.home)
            return True
        applied = self.settler.settle(unit, outcome, ops)
        if held:
            self.hub.settled(unit.raw)
        return applied

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        return self.settler.mark(unit, ops)

    def flush(self) -> None:
        """Acknowledge the process's finished successes now rather than within the window."""
        self.hub.flush(self.lane)

    def hand_back(self) -> None:
        """Put back, unchanged, the jobs the process holds that no processor runs (`BatchList.hand_back`)."""
        self.hub.hand_back(self.settler)

    def release(self) -> None:
        """What `hand_back` does, as the processor stops; its connections are closed."""
        self.hand_back()
        self.lane.close()


def build_fetch(config: Config, client: redis.Redis, identity: str, scripts: Scripts,
                slot: int = 0, paused: PausedQueues | None = None,
                hub: BatchList | None = None) -> BasicFetch | ReliableFetch:
    if config.fetch == "basic":
        return BasicFetch(config, client, scripts, paused=paused)
    return ReliableFetch(config, client, identity, scripts, slot=slot, paused=paused, hub=hub)
