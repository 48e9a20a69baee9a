"""Putting back the jobs of worker processes that died (reliable fetch), on a thread of its own.

Every reserved list is named in `sidequest:reservations` (the fetch script adds it), so
recovery reads that set instead of scanning the keyspace. A list whose owner's heartbeat hash
`<identity>` has expired belongs to a dead process: its jobs go back to the head of their
queues, one Lua call per job that checks the owner is still silent and that the job is still
reserved, so two recovering processes cannot both move a job, and a process that was only
paused (SIGSTOP) and beats again keeps its work. An emptied list of a dead owner leaves the set.
A supervisor that reaped a child need not wait for its heartbeat to expire: `recover_process`
deletes it and recovers that one identity's lists with the same moves.

Each recovery adds one to `recovery_count` in the payload (which makes the job run alone next
time, see `isolation`); past `max_recoveries` the job goes to `dead` with error_class
`sidequest.RecoveryLimitExceeded`, so a job that crashes its process cannot crash workers
forever. Only one process recovers at a time (a lock that only its owner releases), and the
work runs on its own thread so it never delays a heartbeat.

In Cluster mode each queue has its own index, `sidequest:reservations:{q}`, and its reserved
lists live in its slot: recovery reads the index of every queue in `queues` and of its own. The owner's
heartbeat hash is in another slot, so it is read just before the job is moved rather than
inside the script; a process that was only paused and beats again in between finds its job
recovered (the trace in `sidequest:recovered:{q}:<identity>`) and writes nothing for it, so
the job still runs once more at most.

Each pass, under the same lock, also gives back the group slots of this worker's queues whose
job is nowhere (`lanes.slots`): a laned job lost with a process under basic fetch, or ended by a
Ruby worker, frees its group within a few passes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

import redis

from sidequest.config import Config
from sidequest.jobs.payload import decode, encode, in_millis, queue_of, stamp
from sidequest.store import faults, keys
from sidequest.store.lanes.slots import SlotReconciler, grace_of
from sidequest.store.scripts import Scripts
from sidequest.worker.background.heartbeat import forget
from sidequest.worker.background.loop import Background
from sidequest.worker.lifecycle import Lifecycle
from sidequest.worker.outcome import Outcome, invalid

log = logging.getLogger(__name__)

LIMIT_ERROR = "sidequest.RecoveryLimitExceeded"
OTHER_QUEUES = 20  # queues of other workers whose group slots a pass looks at (SSCAN's COUNT hint)


def lock_ttl_ms(config: Config) -> int:
    """How long the recovery lock lives (milliseconds), should its holder die while recovering:
    five recovery intervals (a run ends long before), but never more than half `heartbeat_ttl`.
    A dead process's jobs must be back within about one heartbeat TTL (the delivery contract);
    a lock that outlived the TTL would hold up every recovery past it, the dead holder's own
    jobs included. A run longer than the lock is safe: the scripts check each move."""
    return max(int(min(5 * config.recovery_interval, config.heartbeat_ttl / 2) * 1000), 1)


class Recovery:
    def __init__(self, config: Config, client: redis.Redis, identity: str, scripts: Scripts,
                 lifecycle: Lifecycle | None = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.redis = client
        self.identity = identity
        self.scripts = scripts
        self.lifecycle = lifecycle or Lifecycle()
        self.clock = clock
        self.slots = SlotReconciler(client, grace_of(config.heartbeat_interval))  # group slots that heal
        self._queues_cursor = 0  # where the last pass's page of the `queues` set ended
        # a pass every recovery_interval; a Redis error is logged once until a pass succeeds
        self.background = Background("sidequest-recovery", self._pass, what="orphan recovery",
                                     retry=config.recovery_interval, outage=(redis.RedisError, OSError), loud=True)

    def start(self) -> None:
        self.background.start()

    def stop(self) -> None:
        self.background.stop()

    def _pass(self) -> float:
        self.run()
        return self.config.recovery_interval

    # -- work ------------------------------------------------------------------------------------
    def run(self) -> int:
        """Recover every orphaned job now; return how many were moved."""
        if not self.redis.set(keys.RECOVERY_LOCK, self.identity, nx=True, px=lock_ttl_ms(self.config)):
            return 0  # another process is at it; the scripts would make us no-ops anyway
        moved = 0
        try:
            self._prune_processes()
            space = self.scripts.keys
            for index in self._indexes():
                for raw_key in cast("set[bytes]", self.redis.smembers(index)):
                    key = raw_key.decode()
                    owner = space.identity_of_reserved(key)
                    if owner == self.identity or self.redis.exists(keys.process(owner)):
                        continue
                    moved += self._recover_list(key, owner, index)
            self._heal_slots()  # after: a recovered job is in its queue, still counted
        finally:
            self.scripts.release_lock(keys=[keys.RECOVERY_LOCK], args=[self.identity])
        return moved

    def _heal_slots(self) -> None:
        """Give back the group slots whose job is nowhere (`lanes.slots`): of this worker's queues
        at every pass, and of a few others in turn (`queues`, read a page a pass), so a queue no
        sidequest worker listens on (a Ruby worker's) heals too. A lane key set by hand to another
        type is that queue's fault: one line, recovery goes on."""
        queues = [*self.config.all_queue_names, *self._other_queues()]
        try:
            self.slots.run(queues)
        except redis.ResponseError as exc:
            log.warning("could not check the group slots of queues %s: %s", queues, exc)

    def _other_queues(self) -> list[str]:
        """The next page of the `queues` set (SSCAN: bounded, whatever the number of queues)."""
        self._queues_cursor, page = self.redis.sscan(keys.QUEUES, self._queues_cursor, count=OTHER_QUEUES)
        own = set(self.config.all_queue_names)
        names = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw) for raw in page)
        return [name for name in names if name not in own]

    def recover_process(self, owner: str) -> int:
        """Put back the jobs of one process known to be dead (its supervisor has reaped it) at
        once, rather than after its heartbeat expires: its heartbeat goes first, then its lists
        go through the same per-job move as in `run`, which checks the owner is silent. No lock:
        that move is safe beside another recovery's. Returns how many were moved."""
        pipe = self.redis.pipeline(transaction=False)
        forget(pipe, owner)
        pipe.execute()
        space = self.scripts.keys
        moved = 0
        for index in self._indexes():
            for raw_key in cast("set[bytes]", self.redis.smembers(index)):
                key = raw_key.decode()
                if space.identity_of_reserved(key) == owner:
                    moved += self._recover_list(key, owner, index)
        return moved

    def _recover_list(self, key: str, owner: str, index: str) -> int:
        """Every job of a dead owner's reserved list, back to its queue (or dead); then the list."""
        moved = 0
        for raw in cast("list[bytes]", self.redis.lrange(key, 0, -1)):
            moved += self._recover(key, owner, raw)
        self._forget_if_empty(key, owner, index)
        return moved

    def _indexes(self) -> list[str]:
        """The sets naming reserved lists: one, or in Cluster mode one per queue."""
        space = self.scripts.keys
        if not space.cluster:
            return [keys.RESERVATIONS]
        listed = {name.decode() for name in cast("set[bytes]", self.redis.smembers(keys.QUEUES))}
        return [space.reservations(name) for name in sorted(listed | set(self.config.all_queue_names))]

    def _forget_if_empty(self, key: str, owner: str, index: str) -> None:
        """Drop an emptied list of a dead owner from the set (a WATCH keeps a late job safe)."""
        if self.scripts.keys.cluster:  # the owner's hash is in another slot: checked just before
            self.scripts.forget_reserved(keys=[index, key], args=[])
            return
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key, keys.process(owner))  # type: ignore[no-untyped-call]  # untyped in redis-py
                if pipe.llen(key) or pipe.exists(keys.process(owner)):
                    return
                pipe.multi()
                pipe.srem(keys.RESERVATIONS, key)
                pipe.execute()
            except redis.WatchError:
                pass

    def _prune_processes(self) -> None:
        """Drop identities whose heartbeat expired from `processes` (Sidekiq's ProcessSet.cleanup)."""
        members = list(cast("set[bytes]", self.redis.smembers(keys.PROCESSES)))
        if not members:
            return
        pipe = self.redis.pipeline(transaction=False)
        for member in members:
            pipe.exists(keys.process(member.decode()))
        gone = [m for m, alive in zip(members, pipe.execute(), strict=True) if not alive]
        if gone:
            self.redis.srem(keys.PROCESSES, *gone)

    def _recover(self, key: str, owner: str, raw: bytes) -> int:
        now = self.clock()
        payload: dict[str, Any] | None = None
        try:
            payload = decode(raw)
            outcome, queue = self._outcome(payload, now)
        except (ValueError, TypeError, RecursionError) as exc:  # not a job: dead, bytes kept
            payload, queue = None, "default"
            outcome = invalid(raw, queue, "sidequest.errors.PayloadError", str(exc), now)
        mode = "queue" if outcome.kind == "put_back" else "dead"
        space = self.scripts.keys
        alive = [keys.process(owner)]
        if space.cluster:  # the list's own queue, in its slot; the owner's silence was read just before
            queue = cast("keys.ClusterKeyspace", space).queue_of_reserved(key)
            alive = []
        dest = space.queue(queue) if mode == "queue" else space.dead(queue)
        ops = self.lifecycle.ops("recovered", outcome.payload if payload is not None else None, outcome)
        result = int(faults.settled(self.scripts.recover(
            keys=[key, dest, space.recovered(owner, queue), *alive],
            args=[raw, outcome.blob or b"", mode, now, queue, now - self.config.dead_timeout,
                  self.config.dead_max_jobs, now, keys.RECOVERED_TTL, *ops]), raw))
        if result == 1:
            log.warning("recovered a job of dead process %s into %s", owner,
                        f"queue {queue!r}" if mode == "queue" else "the dead set")
        return max(result, 0)

    def _outcome(self, payload: dict[str, Any], now: float) -> tuple[Outcome, str]:
        """Back to its queue with one more `recovery_count`, or past the limit, dead."""
        count = payload.get("recovery_count", 0)
        count = (count if isinstance(count, int) and not isinstance(count, bool) else 0) + 1
        payload["recovery_count"] = count
        queue = queue_of(payload)
        if count <= self.config.max_recoveries:
            return Outcome("put_back", blob=encode(payload), at=now, payload=payload), queue
        failed = stamp(now, self.config.sidekiq_version >= 8 or in_millis(payload))
        payload.update(error_class=LIMIT_ERROR, failed_at=failed, error_message=(
            f"the worker running this job died {count} times (limit {self.config.max_recoveries});"
            " the job may be what kills it"))
        return Outcome("dead", blob=encode(payload), at=now, payload=payload, exhausted=True), queue
