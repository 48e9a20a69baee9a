"""Reliable fetch's side shared by a process's processors (a capsule's, see `fetch`): the batch
list, the jobs in hand, and the acknowledger.

Reliable fetch takes jobs in batches, one Redis call for every processor that is idle now: the
processor that finds nothing in hand calls RESERVE for itself and for the processors waiting
meanwhile, which moves up to that many jobs atomically from their queues into the process's
batch list `sidequest:reserved:<identity>:batch` (each capsule of the process has a `BatchList` and a
batch list of its own, `...:batch-<capsule>`, over its own queues). While jobs are short, the
call also takes some to keep in hand, as many as the processors asked for during the last few
fetches (PREFETCH_ROUNDS, at most `prefetch`), and the processor that leaves fewer than half
of them in hand fetches again before running its own: so the others find their next job in
hand instead of waiting for a round trip, and a busy process makes one call per several jobs.
With jobs longer than a fetch no one asks meanwhile and nothing is kept. A job kept in hand
PREFETCH_HOLD without being taken goes back to the head of its queue (the acknowledger does it,
whether successes wait or not, and the hub hands them all back when it closes), so a process
busy with long jobs does not hold short ones another worker could run. A job in hand is handed
out only while it is surely still this process's: kept less than PREFETCH_HOLD, and since it was
taken the process's heartbeat never lapsed (`heartbeat.Lease`, two float reads): otherwise
another process may have recovered it, and it goes back through SETTLE's check instead.

A success is acknowledged when it ends, not "with the next fetch": the hub's acknowledger
(`acknowledger.Acknowledger`, driven by its thread, `AckThread`) removes it from the batch list
within `ACK_WINDOW`, unless a RESERVE call leaves sooner and carries it. Every other outcome is
applied at once by the processor (`unit.Settler`), removing the job from its list in the same
script. When no queue has work, each idle processor blocks (BLMOVE, bounded by `fetch_timeout`)
on one queue, each on a different one, into a list of its own, `sidequest:reserved:<identity>:<slot>`;
a job it gets that way is acknowledged at once. A process that dies leaves its jobs in these
lists for `recovery` to put back.

A call whose reply was lost may have moved a job into our lists without us knowing: the next
fetch reads them back and adopts it (`reserve.BatchLedger`, the asyncio runner's rule too).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, cast

import redis

from sidequest.config import Config
from sidequest.store import keys
from sidequest.store.direct import DirectPath, direct_path_for
from sidequest.store.outage import REDIS_ERRORS, Backoff
from sidequest.store.scripts import Scripts
from sidequest.worker.background.heartbeat import Lease
from sidequest.worker.fetch.acknowledger import (
    ACK_BACKOFF_MAX,
    ACK_BACKOFF_START,
    ACK_WINDOW,
    Ack,
    Acknowledger,
    AckThread,
)
from sidequest.worker.fetch.queue_order import PausedQueues, QueueOrder, blocking_timeout
from sidequest.worker.fetch.reserve import BatchLedger, Taken, queue_of_raw
from sidequest.worker.fetch.unit import Settler
from sidequest.worker.isolation import SUSPECT_AFTER

__all__ = ["ACK_WINDOW", "PREFETCH_HOLD", "PREFETCH_ROUNDS", "BatchList", "Waiter", "default_prefetch"]

log = logging.getLogger(__name__)

# A hub keeps in hand as many jobs as its processors asked for during this many of its fetches
# (at most `prefetch`, by default twice the concurrency): with short jobs a processor that ends
# one finds the next in hand instead of waiting for a fetch; with jobs longer than a fetch's round
# trip no one asks meanwhile, and it keeps none (see module).
PREFETCH_ROUNDS = 4
# A job kept in hand this long (seconds) goes back to the head of its queue, for any idle worker:
# the processors are all busy with longer jobs than those the prefetch was sized by.
PREFETCH_HOLD = 0.1

Held = tuple[str, bytes, float]  # a job in hand: queue key, job bytes, when the call that took it began (monotonic)


class Waiter:
    """A processor waiting for another's fetch: a lock it sleeps on, and what it is handed."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # held: `acquire` sleeps until the fetching processor releases it
        self.job: Taken | None = None


class BatchList:
    """One capsule's batch list (the process's, with no capsules): the successes waiting to be
    acknowledged, the jobs taken for idle processors, and which processor fetches now (see
    module). Shared by the capsule's processors."""

    def __init__(self, config: Config, identity: str, scripts: Scripts, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.time, paused: PausedQueues | None = None, *,
                 client: redis.Redis, ack_window: float = ACK_WINDOW, batch: str = keys.BATCH_SLOT,
                 lease: Lease | None = None) -> None:
        self.identity = identity
        # the process's heartbeat lease: a job in hand is handed out only while it holds (without
        # a heartbeat, as a hub made alone, nothing in hand is surely ours)
        self.lease = lease or Lease(0.0)
        self.keys = scripts.keys
        # a capsule's hub has a batch list of its own (`keys.capsule_slot`), so one capsule's
        # fetch never takes jobs for another's queues; `config` is then the capsule's. In Cluster
        # mode it has one per queue (in the queue's slot), made as the queues are met.
        self.batch = batch
        self.reserved = keys.reserved(identity, batch)
        self._batches: dict[str, str] = {}  # Cluster mode: queue name -> its batch list (added under _lock)
        self._batch_keys: set[str] = set()  # the same lists, for a membership test that iterates nothing
        self.order = QueueOrder(config, rng, paused, self.keys)
        self.timeout = blocking_timeout(config)
        self.scripts = scripts
        self.ledger = BatchLedger(clock=clock)  # what the batch lists hold, the RESERVE calls, the read-back
        self.queue_faults = self.ledger.queue_faults
        self._lock = threading.Lock()
        # taken for processors that wait, or kept in hand: not yet picked up (oldest first)
        self._handoff: deque[Held] = deque()
        self._expired: list[Held] = []  # taken out of the hand, not ours for sure: for the acknowledger to put back
        self._waiters: deque[Waiter] = deque()  # processors waiting for the fetching one to hand them a job
        self._fetching = False
        # how many jobs the processors asked for during the current fetch, during one fetch
        # (smoothed), and so how many to keep in hand (`_target`, at most `_cap`)
        self._cap = default_prefetch(config) if config.prefetch is None else config.prefetch
        self._asked = 0
        self._demand = 0.0
        self._target = 0
        self._requeue_after = 0.0  # put-backs of jobs in hand wait until then after a failure
        self._requeue_backoff = Backoff(ACK_BACKOFF_START, ACK_BACKOFF_MAX)
        # the acknowledger, driven by a thread that sends the successes no RESERVE carried within
        # the window, and puts back the jobs in hand no longer surely ours (`_put_back_stale`)
        self.acks = Acknowledger(ack_window)
        lane = direct_path_for(client)  # the acknowledger's, also for the jobs it puts back
        settler = Settler(config, client, scripts, clock, lane)
        self._ack_thread = AckThread(self.acks, lambda acks: self._reserve(lane, [], "", 0, acks),
                                     tend=lambda: self._put_back_stale(settler),
                                     end=lambda: self._end_acknowledger(settler, lane),
                                     holding=lambda: bool(self._handoff), look_every=PREFETCH_HOLD)

    def batch_of(self, queue: str) -> str:
        """The batch list that holds what this hub took from `queue`."""
        if not self.keys.cluster:
            return self.reserved
        batch = self._batches.get(queue)
        if batch is None:
            batch = self.keys.reserved(self.identity, self.batch, queue)
            with self._lock:
                self._batches[queue] = batch
                self._batch_keys.add(batch)
        return batch

    def holds(self, home: str | None) -> bool:
        """True if `home` is one of this hub's batch lists."""
        return home == self.reserved or (self.keys.cluster and home in self._batch_keys)

    def queues(self) -> list[str]:
        """The names of the queues this hub fetches from."""
        return [self.keys.queue_name(key) for key in self.order.keys]

    def batches(self) -> list[str]:
        """Every batch list of this hub (in Cluster mode, those of the queues met so far)."""
        if not self.keys.cluster:
            return [self.reserved]
        with self._lock:
            return list(self._batches.values())

    def take(self, lane: DirectPath, client: redis.Redis, own: str | int,
             waiter: Waiter) -> tuple[Taken | None, list[str] | None]:
        """A job for the calling processor; else None, with the queue order it may block on
        (empty: every queue is paused), or None when it waited on another processor's fetch.
        A processor that takes a job in hand and leaves fewer than half the target fetches more
        before it runs its own (`refill`)."""
        refill: Held | None = None
        with self._lock:
            self._asked += self._fetching
            if self._handoff and self._drop_expired():
                refill = self._handoff.popleft()
                if self._fetching or 2 * len(self._handoff) >= self._target:
                    return refill[:2], None
            waits = self._fetching  # another processor fetches now, for us too
            if waits:
                waiter.job = None
                self._waiters.append(waiter)
            else:
                self._fetching = True
                now = time.monotonic()
                # nothing is kept in hand while the lease does not hold: it could not be handed out
                keep = self._target if self.lease.holds(now, now) else 0
                want = (refill is None) + len(self._waiters) + max(keep - len(self._handoff), 0)
                acks = self.acks.take()  # this call carries the successes so far: a later one opens a window
                known = self.ledger.to_read_back()  # this fetch reads the lists back; a failure owes it again
                self._asked = 0
        if waits:
            return self._wait(waiter), None
        return self._fetch(lane, client, own, want, acks, known, refill)

    def _fetch(self, lane: DirectPath, client: redis.Redis, own: str | int, want: int, acks: list[Ack],
               known: Counter[bytes] | None, refill: Held | None) -> tuple[Taken | None, list[str] | None]:
        """`take`'s call: the read-back a lost reply owes, else RESERVE, for the caller and the waiters."""
        got: list[Taken] = []
        order: list[str] = []
        began = time.monotonic()  # what this call takes is ours from then on, if the lease holds
        try:
            if known is not None:
                got = self._adopt(client, known)
            if not got:
                order = self.order()
                got = self._reserve(lane, order, own, want if order else 0, acks)
                acks = []
        except BaseException:
            if known is not None:
                self.ledger.unread()  # not read back: the next fetch does
            with self._lock:
                if refill is not None:  # the job in hand goes to whoever asks next, as old as it was
                    self._handoff.appendleft(refill)
            self._hand_out([], acks)
            raise
        self._hand_out(got, acks, keep=refill is None, pace=True, began=began)
        if refill is not None:
            return refill[:2], None
        return (got[0] if got else None), order

    def _drop_expired(self) -> bool:
        """(Under the lock.) True if the oldest job in hand may be handed out: it was taken less
        than PREFETCH_HOLD ago and the lease held ever since (see module). Those before it that
        may not are moved to `_expired`, for the acknowledger to put back through SETTLE's
        check: never run, as another process may have recovered them."""
        now = time.monotonic()
        since, until = self.lease.span
        handoff = self._handoff
        while handoff:
            taken = handoff[0][2]
            if since <= taken and now < until and now - taken < PREFETCH_HOLD:
                return True
            self._expired.append(handoff.popleft())
            self._ack_thread.wake()
        return False

    def _wait(self, waiter: Waiter) -> Taken | None:
        """Wait (bounded) for the fetching processor to hand this one a job, or news of none."""
        woken = waiter.wake.acquire(timeout=self.timeout)
        with self._lock:
            if not woken:
                try:
                    self._waiters.remove(waiter)
                except ValueError:  # the fetching one took us off the list and is waking us now
                    waiter.wake.acquire()
            job, waiter.job = waiter.job, None
        return job

    def _hand_out(self, got: list[Taken], acks: list[Ack], *, keep: bool = True, pace: bool = False,
                  began: float = 0.0) -> None:
        """After a fetch (which `began` then): one job to each waiting processor (the first
        stays with the caller, if it `keep`s one), the rest kept for whoever asks next; waiters
        with nothing for them are told so. After a fetch that succeeded (`pace`), what was
        asked for during it sets how many jobs to keep in hand."""
        with self._lock:
            self._fetching = False
            if pace:
                self._demand = (self._demand + self._asked) / 2
                self._target = min(self._cap, int(self._demand * PREFETCH_ROUNDS))
            self.acks.returned(acks)  # not applied (an error, or adopted instead): keep them
            rest = deque(got[1:] if keep else got)
            while self._waiters and (rest or not got):
                waiter = self._waiters.popleft()
                waiter.job = rest.popleft() if rest else None
                waiter.wake.release()
            if rest:
                self._handoff.extend((key, raw, began) for key, raw in rest)
                self._ack_thread.nudge()  # it must look within PREFETCH_HOLD

    def _reserve(self, lane: DirectPath, order: list[str], own: str | int, want: int, acks: list[Ack]) -> list[Taken]:
        if self.keys.cluster:
            return self._reserve_per_queue(lane, order, own, want, acks)
        own_key = own if isinstance(own, str) else keys.reserved(self.identity, own)
        return self.ledger.send(lane, self.scripts.reserve, [*order, self.reserved, keys.RESERVATIONS, own_key],
                                want, acks)

    def _reserve_per_queue(self, lane: DirectPath, order: list[str], own: str | int, want: int,
                           acks: list[Ack]) -> list[Taken]:
        """Cluster mode: one RESERVE per queue (each in its own slot), in fetch order, until
        `want` jobs are taken; each carries the successes of its queue's batch list. A call that
        fails (an error reply of its slot: CLUSTERDOWN, TRYAGAIN, OOM...; or a lost reply) does
        not stop the others, and the jobs they took are returned (`_failed_calls`)."""
        owed: dict[str, list[Ack]] = {}
        for ack in acks:
            owed.setdefault(ack[2], []).append(ack)
        got: list[Taken] = []
        failed: list[tuple[str, BaseException, list[Ack]]] = []
        space = self.keys

        def call(queue: str, script_keys: list[str], count: int, mine: list[Ack]) -> list[Taken]:
            try:
                return self.ledger.send(lane, self.scripts.reserve, script_keys, count, mine)
            except REDIS_ERRORS as exc:
                failed.append((queue, exc, mine))
                return []
        for key in order:
            queue = space.queue_name(key)
            batch = self.batch_of(queue)
            mine = owed.pop(batch, [])
            if len(got) >= want and not mine:
                continue
            own_key = space.reserved(self.identity, own, queue)
            got += call(queue, [key, batch, space.reservations(queue), own_key], max(want - len(got), 0), mine)
        for batch, mine in owed.items():  # successes of queues this fetch did not look at (paused)
            queue = cast("keys.ClusterKeyspace", space).queue_of_reserved(batch)
            call(queue, [space.queue(queue), batch, space.reservations(queue), batch], 0, mine)
        if failed:
            self._failed_calls(failed, got)
        return got

    def _failed_calls(self, failed: list[tuple[str, BaseException, list[Ack]]], got: list[Taken]) -> None:
        """Some of a fetch's per-queue calls failed (a lost reply has the next fetch read the
        lists back: `BatchLedger.send`). With no job taken, the first failure is raised (the
        caller keeps every success: those a call did send go again and find nothing, as after a
        lost reply). Else the jobs taken run: the failed calls' successes wait for the next
        call, and each queue's failure is logged (once a minute at most)."""
        if not got:
            raise failed[0][1]
        for queue, exc, mine in failed:
            self.acks.returned(mine)
            self.queue_faults.call_failed(queue, exc)

    def _adopt(self, client: redis.Redis, known: Counter[bytes]) -> list[Taken]:
        """Jobs in the batch lists that this process did not know of before reading them."""
        found = self.ledger.adopt(((batch, cast("list[bytes]", client.lrange(batch, 0, -1)))
                                   for batch in self.batches()), known)
        if not self.keys.cluster:
            return [(self.keys.queue(queue_of_raw(raw)), raw) for _, raw in found]
        space = cast("keys.ClusterKeyspace", self.keys)
        return [(space.queue(space.queue_of_reserved(batch)), raw) for batch, raw in found]

    def acknowledge(self, raw: bytes, ops: list[Any], home: str | None = None) -> None:
        """A success of a batch list: removed within the window (see module)."""
        self.acks.add((raw, ops, home or self.reserved))

    def _put_back_stale(self, settler: Settler) -> None:
        """(The acknowledger thread's chore.) Put back the jobs in hand that may no longer be
        handed out (`_drop_expired`), with a back-off while that fails."""
        if not (self._handoff or self._expired) or time.monotonic() < self._requeue_after:
            return
        with self._lock:
            self._drop_expired()
            stale, self._expired = self._expired, []
        if not stale:
            return
        if self._requeue(settler, stale):
            self._requeue_backoff.reset()
        else:
            self._requeue_after = time.monotonic() + self._requeue_backoff.failed()

    def hand_back(self, settler: Settler) -> bool:
        """Put back, unchanged, every job held that no processor runs: those kept in hand, or
        taken for processors that stopped before running them (see `_requeue`)."""
        with self._lock:
            held, self._expired = [*self._expired, *self._handoff], []
            self._handoff.clear()
        return self._requeue(settler, held)

    def _end_acknowledger(self, settler: Settler, lane: DirectPath) -> None:
        """As the acknowledger thread ends (`close`): the jobs in hand go back at once, not a
        heartbeat TTL later by recovery (which would count them as recovered, though they never ran)."""
        try:
            if not self.hand_back(settler):
                log.warning("could not put back the jobs kept in hand; they stay reserved and will be recovered")
        except Exception:  # thread boundary
            log.exception("could not put back the jobs kept in hand; they stay reserved and will be recovered")
        finally:
            lane.close()

    def _requeue(self, settler: Settler, held: list[Held]) -> bool:
        """Put `held`, taken out of the hand, back at the head of their queues in one round trip,
        the oldest last, so it is the next taken. False on a Redis error: which of them went
        back is unknown, so they are left to the next fetch, which reads the batch list back and
        adopts those still in it."""
        if not held:
            return True
        jobs = [(self.keys.queue_name(key), raw) for key, raw, _ in reversed(held)]
        try:
            settler.requeue([(queue, raw, self.batch_of(queue)) for queue, raw in jobs])
            sent = True
        except (redis.RedisError, OSError):
            sent = False
        for _, raw in jobs:
            self.ledger.forget(raw)
        if not sent:
            self.ledger.lost_reply()
        return sent

    def close(self, lane: DirectPath | None = None) -> None:
        """Stop the acknowledger, which hands back the jobs in hand as it ends; the successes it
        had not sent yet are sent now (on `lane`, if given)."""
        self._ack_thread.close()
        if lane is not None:
            self.flush(lane)

    def settled(self, raw: bytes) -> None:
        """A job of the batch list left it through a processor's own call."""
        self.ledger.forget(raw)

    def flush(self, lane: DirectPath) -> None:
        """Acknowledge the finished successes now (before waiting, stopping or dying)."""
        self.acks.flush(lambda acks: self._reserve(lane, [], "", 0, acks))

    def lost_reply(self) -> None:
        self.ledger.lost_reply()


def default_prefetch(config: Config) -> int:
    """Twice the concurrency; none when `max_recoveries` is below SUSPECT_AFTER: a job in hand
    at a crash is counted as recovered with the running ones, and with so few recoveries allowed
    one crash would make it a suspect, two send it to `dead`, though it never started."""
    return 2 * config.concurrency if config.max_recoveries >= SUSPECT_AFTER else 0
