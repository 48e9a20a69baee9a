"""Reliable fetch's side shared by a process's processors (a capsule's, see `fetch`): the batch
list, the jobs in hand, and the acknowledger.

Reliable fetch takes jobs in batches, one Redis call for every processor that is idle now: the
processor that finds nothing in hand calls RESERVE for itself and for the processors waiting
meanwhile, which moves up to that many jobs atomically from their queues into the process's
batch list `sidequest:reserved:<identity>:batch` (each capsule of the process has a `Hub` and a
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
removes it from the batch list within `ACK_WINDOW` (a few milliseconds), together with the
other successes that ended in that window (at most `ACK_BATCH` wait for one call), unless a
RESERVE call leaves sooner and carries them. So a busy process still makes about one round trip
per batch, and a process killed by `kill -9` runs again only the jobs that were running, or that
ended in the last few milliseconds (the delivery contract, docs/reliability.md). Every other
outcome is applied at once by the processor (`work.Settler`), removing the job from its list in
the same script. When no queue has work, each idle processor blocks (BLMOVE, bounded by
`fetch_timeout`) on one queue, each on a different one, into a list of its own,
`sidequest:reserved:<identity>:<slot>`; a job it gets that way is acknowledged at once. A process
that dies leaves its jobs in these lists for `recovery` to put back.

Commands are never re-sent by the Redis client (see `connection`): if a call's reply is lost,
a job may be in our lists without us knowing. The next fetch reads the list back and adopts
what it holds that this process does not know of (what it knew before reading), so the job
runs instead of waiting for recovery.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis

from sidequest.config import Config
from sidequest.jobs.payload import decode, queue_of
from sidequest.store import faults, keys
from sidequest.store.direct import Lane, lane_for
from sidequest.store.outage import LOST, REDIS_ERRORS, Backoff
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.queue_order import PausedQueues, QueueOrder, blocking_timeout
from sidequest.worker.fetch.unit import Settler
from sidequest.worker.heartbeat import Lease
from sidequest.worker.isolation import SUSPECT_AFTER

log = logging.getLogger(__name__)
T = TypeVar("T")

# A success waits at most this long (seconds) for others to share its acknowledgement, and at
# most this many wait for one call. The window bounds what a `kill -9` can run again beyond the
# jobs that were running: widening it for speed breaks the delivery contract.
ACK_WINDOW = 0.002
ACK_BATCH = 64
# After its last success the acknowledger stays armed this long (seconds), looking once a window
# without being woken, before it sleeps until a success wakes it: a wake-up per window cost about
# 2 µs of CPU per job (measured, pinned process, bench/throughput's no-op jobs).
ACK_LINGER = 0.1
ACK_BACKOFF_START, ACK_BACKOFF_MAX = 0.05, 2.0
# A hub keeps in hand as many jobs as its processors asked for during this many of its fetches
# (at most `prefetch`, by default twice the concurrency): with short jobs a processor that ends
# one finds the next in hand instead of waiting for a fetch; with jobs longer than a fetch's round
# trip no one asks meanwhile, and it keeps none (see module).
PREFETCH_ROUNDS = 4
# A job kept in hand this long (seconds) goes back to the head of its queue, for any idle worker:
# the processors are all busy with longer jobs than those the prefetch was sized by.
PREFETCH_HOLD = 0.1


Taken = tuple[str, bytes]  # (queue key, job bytes)
Held = tuple[str, bytes, float]  # a job in hand: queue key, job bytes, when the call that took it began (monotonic)
Ack = tuple[bytes, list[Any], str]  # a success: job bytes, its 'finished' ops, the batch list holding it


class Waiter:
    """A processor waiting for another's fetch: a lock it sleeps on, and what it is handed."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # held: `acquire` sleeps until the fetching processor releases it
        self.job: Taken | None = None


class Hub:
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
        self.ack_window = ack_window
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
        self.clock = clock
        self.queue_faults = faults.QueueFaults()
        self._lock = threading.Lock()
        # taken for processors that wait, or kept in hand: not yet picked up (oldest first)
        self._handoff: deque[Held] = deque()
        self._expired: list[Held] = []  # taken out of the hand, not ours for sure: for the acknowledger to put back
        self._acks: deque[Ack] = deque()  # successes not yet acknowledged
        self._known: Counter[bytes] = Counter()  # jobs of the batch list this process knows of
        self._waiters: deque[Waiter] = deque()  # processors waiting for the fetching one to hand them a job
        self._fetching = False
        # how many jobs the processors asked for during the current fetch, during one fetch
        # (smoothed), and so how many to keep in hand (`_target`, at most `_cap`)
        self._cap = default_prefetch(config) if config.prefetch is None else config.prefetch
        self._asked = 0
        self._demand = 0.0
        self._target = 0
        self._suspect = False  # a reply was lost: the list may hold a job no one knows of
        # the acknowledger: a thread that sends the successes no RESERVE carried within the window
        # released to wake the idle acknowledger (a bare lock: releasing it is one C call, where
        # Event.set takes a condition's lock and notifies, on the path of every window's first job)
        self._ack_wake = threading.Lock()
        self._ack_wake.acquire()
        self._ack_full = threading.Event()  # set once ACK_BATCH successes wait
        self._ack_pending = False  # a window is open: successes wait that no call has carried
        self._ack_opened = 0.0  # when it opened (monotonic)
        self._ack_idle = True  # the acknowledger sleeps on `_ack_wake` (nothing waits)
        self._closed = threading.Event()
        self._requeue_after = 0.0  # put-backs of jobs in hand wait until then after a failure
        self._requeue_backoff = Backoff(ACK_BACKOFF_START, ACK_BACKOFF_MAX)
        self._quiet_since: float | None = None  # when the acknowledger last found nothing waiting
        lane = lane_for(client)  # the acknowledger's, also for the jobs it puts back (`_put_back_stale`)
        self._ack_thread = threading.Thread(target=self._acknowledger,
                                            args=(lane, Settler(config, client, scripts, clock, lane)),
                                            name="sidequest-acknowledger", daemon=True)
        self._ack_thread.start()

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

    def take(self, lane: Lane, client: redis.Redis, own: str | int,
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
                self._ack_pending = False  # this call carries the successes so far: a later one opens a window
                now = time.monotonic()
                # nothing is kept in hand while the lease does not hold: it could not be handed out
                keep = self._target if self.lease.holds(now, now) else 0
                want = (refill is None) + len(self._waiters) + max(keep - len(self._handoff), 0)
                acks = self._drain()
                suspect, known = self._suspect, (Counter(self._known) if self._suspect else None)
                self._suspect = False  # this fetch reads the list back; a failure sets it again
                self._asked = 0
        if waits:
            return self._wait(waiter), None
        got: list[Taken] = []
        order: list[str] = []
        began = time.monotonic()  # what this call takes is ours from then on, if the lease holds
        try:
            if suspect and known is not None:
                got = self._adopt(client, known)
            if not got:
                order = self.order()
                got = self._reserve(lane, order, own, want if order else 0, acks)
                acks = []
        except BaseException:
            with self._lock:
                self._suspect = self._suspect or suspect  # not read back: the next fetch does
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
            self._wake_acknowledger()
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
            self._acks.extendleft(reversed(acks))  # not applied (an error, or adopted instead): keep them
            for _, raw in got:
                self._known[raw] += 1
            rest = deque(got[1:] if keep else got)
            while self._waiters and (rest or not got):
                waiter = self._waiters.popleft()
                waiter.job = rest.popleft() if rest else None
                waiter.wake.release()
            if rest:
                self._handoff.extend((key, raw, began) for key, raw in rest)
                if self._ack_idle:  # it sleeps up to a second: it must look within PREFETCH_HOLD
                    self._wake_acknowledger()

    def _reserve(self, lane: Lane, order: list[str], own: str | int, want: int, acks: list[Ack]) -> list[Taken]:
        if self.keys.cluster:
            return self._reserve_per_queue(lane, order, own, want, acks)
        own_key = own if isinstance(own, str) else keys.reserved(self.identity, own)
        return self._reserve_call(lane, [*order, self.reserved, keys.RESERVATIONS, own_key], want, acks)

    def _reserve_call(self, lane: Lane, script_keys: list[str], want: int, acks: list[Ack]) -> list[Taken]:
        args: list[Any] = [repr(self.clock()), want, len(acks)]
        for raw, ops, _ in acks:
            args += [raw, *ops]
        reply = faults.reserved(lane.evalsha(self.scripts.reserve, script_keys, args), acks, self.queue_faults)
        with self._lock:
            for raw, _, _ in acks:
                self._forget(raw)
        return [(reply[i].decode(), reply[i + 1]) for i in range(0, len(reply), 2)]

    def _reserve_per_queue(self, lane: Lane, order: list[str], own: str | int, want: int,
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
                return self._reserve_call(lane, script_keys, count, mine)
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
        """Some of a fetch's per-queue calls failed. With no job taken, the first failure is raised
        (the caller keeps every success: those a call did send go again and find nothing, as
        after a lost reply). Else the jobs taken run: the failed calls' successes wait for the
        next call, a lost reply has the next fetch read the lists back, and each queue's failure
        is logged (once a minute at most)."""
        with self._lock:  # first: a lost reply must be read back even when an error is raised
            self._suspect = self._suspect or any(isinstance(exc, LOST) for _, exc, _ in failed)
        if not got:
            raise failed[0][1]
        for queue, exc, mine in failed:
            self._acks.extendleft(reversed(mine))
            self.queue_faults.call_failed(queue, exc)

    def _adopt(self, client: redis.Redis, known: Counter[bytes]) -> list[Taken]:
        """Jobs in the batch lists that this process did not know of before reading them."""
        found: list[Taken] = []
        for batch in self.batches():
            held = Counter(cast("list[bytes]", client.lrange(batch, 0, -1)))
            for raw in (held - known).elements():
                queue = (cast("keys.ClusterKeyspace", self.keys).queue_of_reserved(batch) if self.keys.cluster
                         else queue_of_raw(raw))
                found.append((self.keys.queue(queue), raw))
            known = known - held
        return found

    def acknowledge(self, raw: bytes, ops: list[Any], home: str | None = None) -> None:
        """A success of a batch list: removed within the window (see module)."""
        acks = self._acks
        acks.append((raw, ops, home or self.reserved))  # deque appends and pops are atomic: no lock on every job's path
        if len(acks) >= ACK_BATCH:
            self._ack_full.set()
        if not self._ack_pending:  # the first success since the last call opens a window
            self._ack_opened = time.monotonic()
            self._ack_pending = True
            if self._ack_idle:
                self._wake_acknowledger()

    def _wake_acknowledger(self) -> None:
        try:
            self._ack_wake.release()
        except RuntimeError:  # released already: it is waking
            pass

    def _acknowledger(self, lane: Lane, settler: Settler) -> None:
        """Send the successes that no call carried within their window, and put back the jobs
        kept in hand that are no longer surely ours (`_put_back_stale`), whether successes wait
        or not; at the end, hand back every job still in hand.

        A window opens with the first success after the last call that carried successes (a
        RESERVE or this thread's own), and it is sent once the window has passed, or at once
        when ACK_BATCH wait. A RESERVE that leaves meanwhile carries them and closes the window,
        so while processors fetch often this thread makes no call at all. While successes keep
        coming it looks once a window by itself; only after ACK_LINGER without any does it
        sleep until a success wakes it (`_ack_idle`), so a busy process costs no wake-up per
        success or per window. A failure keeps the successes for the next attempt, after a
        back-off (their reserved copies keep them safe meanwhile); anything else that escapes is
        caught here, at the thread's boundary (`AckBackoff`), so acknowledging never ends."""
        sends = AckBackoff(ACK_BACKOFF_START, ACK_BACKOFF_MAX)
        try:
            while not self._closed.is_set():
                try:
                    self._put_back_stale(settler)
                    if self._ack_pending or self._acks:
                        self._send_due(lane, sends)
                    else:
                        self._rest()
                except Exception as exc:  # thread boundary: a Redis error, or a fault outside any job
                    self._closed.wait(sends.failed(exc, len(self._acks)))
        finally:
            self._hand_back_at_close(settler)
            lane.close()

    def _send_due(self, lane: Lane, sends: AckBackoff) -> None:
        """Send the successes if their window has passed (or ACK_BATCH wait), else wait for that,
        at most PREFETCH_HOLD, so jobs in hand are looked at meanwhile."""
        self._quiet_since = None
        if self._ack_pending:
            left = self._ack_opened + self.ack_window - time.monotonic()
            if left > 0 and not self._ack_full.is_set():
                self._ack_full.wait(min(left, PREFETCH_HOLD))
                return  # look again: a call may have carried them, or a new window opened
        self._ack_full.clear()
        self._ack_pending = False  # before draining: a success added after this opens a window
        self.flush(lane)
        sends.succeeded()

    def _rest(self) -> None:
        """Nothing waits: look again within a window while successes came lately (armed: a
        success then costs no wake-up), else sleep until one wakes it (`_ack_idle`)."""
        now = time.monotonic()
        if self._quiet_since is None:
            self._quiet_since = now
        if now - self._quiet_since < ACK_LINGER:
            self._ack_wake.acquire(timeout=min(self.ack_window, PREFETCH_HOLD))
            return
        self._ack_full.clear()
        self._ack_idle = True
        if not (self._ack_pending or self._acks):  # again: a success may have come meanwhile
            # bounded: a close is noticed within a second, a job kept in hand too long sooner
            self._ack_wake.acquire(timeout=PREFETCH_HOLD if self._handoff else 1.0)
        self._ack_idle = False
        self._quiet_since = None

    def _put_back_stale(self, settler: Settler) -> None:
        """Put back the jobs in hand that may no longer be handed out (`_drop_expired`), with
        a back-off while that fails."""
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

    def _hand_back_at_close(self, settler: Settler) -> None:
        """At the end (`close`): the jobs in hand go back at once, not a heartbeat TTL later by
        recovery (which would count them as recovered, though they never ran)."""
        try:
            if not self.hand_back(settler):
                log.warning("could not put back the jobs kept in hand; they stay reserved and will be recovered")
        except Exception:  # thread boundary
            log.exception("could not put back the jobs kept in hand; they stay reserved and will be recovered")

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
        with self._lock:
            for _, raw in jobs:
                self._forget(raw)
            self._suspect = self._suspect or not sent
        return sent

    def close(self, lane: Lane | None = None) -> None:
        """Stop the acknowledger, which hands back the jobs in hand as it ends; the successes it
        had not sent yet are sent now (on `lane`, if given)."""
        self._closed.set()
        self._ack_full.set()  # it may wait for a window to pass
        self._wake_acknowledger()
        if self._ack_thread is not threading.current_thread():
            self._ack_thread.join(5)
        if lane is not None:
            self.flush(lane)

    def _drain(self) -> list[Ack]:
        return drain(self._acks)

    def settled(self, raw: bytes) -> None:
        """A job of the batch list left it through a processor's own call."""
        with self._lock:
            self._forget(raw)

    def _forget(self, raw: bytes) -> None:
        """(Under the lock.) One copy of `raw` is no longer in the batch list."""
        forget_one(self._known, raw)

    def flush(self, lane: Lane) -> None:
        """Acknowledge the finished successes now (before waiting, stopping or dying)."""
        acks = self._drain()
        if not acks:
            return
        try:
            self._reserve(lane, [], "", 0, acks)
        except BaseException:
            self._acks.extendleft(reversed(acks))
            raise

    def lost_reply(self) -> None:
        self._suspect = True


class AckBackoff:
    """An acknowledger's failed sends, one rule for both runners (`Hub`'s thread, `LoopHub`'s
    sends on the loop): the successes stay reserved and are sent again after a back-off that
    doubles from `start` to `most`. One log line per run of failures: a warning for a Redis
    error (an outage), an error with its traceback for anything else (a fault outside any job),
    and one line once sending works again."""

    def __init__(self, start: float, most: float) -> None:
        self.wait = Backoff(start, most)  # the doubling rule a failing fetch follows too
        self.failing = False

    def failed(self, exc: BaseException, waiting: int) -> float:
        """Log `exc` if it begins a run of failures; the seconds to wait before sending again."""
        if not self.failing:
            if isinstance(exc, (redis.RedisError, OSError)):
                log.warning("acknowledging finished jobs failed (%s: %s); they stay reserved and are sent "
                            "again with back-off", type(exc).__name__, exc)
            else:
                log.error("the acknowledger failed (%s: %s) with %d finished job(s) waiting; they stay "
                          "reserved and are sent again with back-off", type(exc).__name__, exc, waiting,
                          exc_info=exc)
        self.failing = True
        return self.wait.failed()

    def succeeded(self) -> None:
        if self.failing:
            log.warning("finished jobs are acknowledged again")
        self.wait.reset()
        self.failing = False


def default_prefetch(config: Config) -> int:
    """Twice the concurrency; none when `max_recoveries` is below SUSPECT_AFTER: a job in hand
    at a crash is counted as recovered with the running ones, and with so few recoveries allowed
    one crash would make it a suspect, two send it to `dead`, though it never started."""
    return 2 * config.concurrency if config.max_recoveries >= SUSPECT_AFTER else 0


def drain(items: deque[T]) -> list[T]:
    """Everything in `items`, taken out; another thread may drain too (a flush), and each item
    goes to one of them (deque pops are atomic)."""
    taken: list[T] = []
    try:
        while True:
            taken.append(items.popleft())
    except IndexError:
        return taken


def forget_one(known: Counter[bytes], raw: bytes) -> None:
    """One copy of `raw` is no longer in a batch list whose jobs `known` counts."""
    left = known[raw] - 1
    if left > 0:
        known[raw] = left
    else:
        known.pop(raw, None)


def queue_of_raw(raw: bytes) -> str:
    try:
        return queue_of(decode(raw))
    except ValueError:  # not a job: processing files it in dead, under the default queue
        return "default"
