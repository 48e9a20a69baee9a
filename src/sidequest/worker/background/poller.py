"""The poller: moves due jobs from `schedule` and `retry` to their queues (Sidekiq's
`Scheduled::Poller`). Periodic jobs are another thread's: `periodic.PeriodicScheduler`.

Each move is one Lua call that removes the job from its sorted set and pushes it onto its
queue together, so a job is never in both places nor in neither, with any number of pollers
and even if this process is killed mid-move (Sidekiq's own ZREM-then-push can lose a job
there). The payload gets a fresh `enqueued_at`, as Sidekiq's client gives it on the move.

Timing: Sidekiq sleeps ~5 s x process count with jitter. Here the poller asks Redis for the
earliest due time in both sets (two O(log n) calls) and sleeps until then, but never longer
than `poll_interval` (1 s by default, less a random 0-20 % so processes spread out), because
a job scheduled meanwhile may be due sooner. A scheduled job therefore starts within about a
second of its time, while an idle system costs each process two tiny reads per second.

In Cluster mode each queue has its own `schedule:{q}` and `retry:{q}` (in its slot, see
`keys.ClusterKeyspace`): the poller looks at those of every queue in `queues`, in one pipelined
read per primary, and moves a due job into the queue whose sets hold it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, cast

import redis

from sidequest.config import Config
from sidequest.errors import PayloadError
from sidequest.jobs.payload import decode, encode, in_millis, stamp
from sidequest.store import keys, lanes
from sidequest.store.scripts import Scripts
from sidequest.worker.background.loop import Background

log = logging.getLogger(__name__)

SETS = (keys.RETRY, keys.SCHEDULE)
BATCH = 100


def due_entry(payload: dict[str, Any], now: float, millis: bool, space: keys.Keyspace,
              queue: str) -> tuple[bytes, tuple[Any, ...] | None]:
    """A due job as it enters `queue` (ENQUEUE_DUE's job and lane arguments): no `at`, a fresh
    `enqueued_at`, its lane if it has one. The poller's rule, which `send_event` follows too when
    it moves a parked job at once."""
    payload.pop("at", None)
    payload["enqueued_at"] = stamp(now, millis or in_millis(payload))
    return encode(payload).encode("utf-8"), lanes.route(payload, space, queue)


class Poller:
    def __init__(self, config: Config, client: redis.Redis, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.redis = client
        self.scripts = Scripts(client)
        self.clock = clock
        self.rng = rng or random.Random()
        self.background = Background("sidequest-poller", self._pass, what="poller", retry=config.poll_interval)

    def start(self) -> None:
        self.background.start()

    def stop(self) -> None:
        self.background.stop()

    def _pass(self) -> float:
        sets = self.sets()  # in Cluster mode a read of `queues`: once a pass
        self.enqueue_due(sets)
        self.stage_lanes()
        return self.next_wait(sets)

    def stage_lanes(self) -> None:
        """Stage the lanes of this worker's queues (`lanes`): a group's rate window has passed,
        or the plain jobs ahead drained. One pipelined call; a queue without lanes reads one key."""
        space, names = self.scripts.keys, self.config.all_queue_names
        if space.cluster:  # one queue's keys at a time, on its primary
            replies = [self._stage(self.redis, name) for name in names]
        else:
            pipe = self.redis.pipeline(transaction=False)
            for name in names:
                self._stage(pipe, name)
            replies = pipe.execute(raise_on_error=False)
        for name, reply in zip(names, replies, strict=True):
            if isinstance(reply, redis.ResponseError):  # a lane key of the wrong type, set by hand
                log.warning("could not stage the lanes of queue %r: %s", name, reply)

    def _stage(self, client: Any, name: str) -> Any:
        space = self.scripts.keys
        try:
            return self.scripts.stage(keys=[space.lanes(name), space.queue(name)], client=client)
        except redis.ResponseError as exc:
            return exc

    def sets(self) -> list[tuple[str, str | None]]:
        """The sorted sets to look at, each with the queue it belongs to (None: each job's own)."""
        space = self.scripts.keys
        if not space.cluster:
            return [(sorted_set, None) for sorted_set in SETS]
        # every queue listed, and this worker's own (a producer lists a queue at most every few seconds)
        listed = {name.decode() for name in cast("set[bytes]", self.redis.smembers(keys.QUEUES))}
        names = sorted(listed | set(self.config.all_queue_names))
        return [(sorted_set(name), name) for name in names for sorted_set in (space.retry, space.schedule)]

    def enqueue_due(self, sets: list[tuple[str, str | None]] | None = None) -> int:
        """Move every job due now (in `sets`, default: `sets()`); return how many moved."""
        moved = 0
        sets = self.sets() if sets is None else sets
        if self.scripts.keys.cluster:  # look first, in one pipelined read: most queues have nothing due
            pipe = self.redis.pipeline(transaction=False)
            for sorted_set, _ in sets:
                pipe.zrangebyscore(sorted_set, "-inf", self.clock(), start=0, num=1)
            sets = [entry for entry, due in zip(sets, pipe.execute(), strict=True) if due]
        for sorted_set, owner in sets:
            while not self.background.stopping.is_set():
                now = self.clock()
                due = cast("list[bytes]", self.redis.zrangebyscore(sorted_set, "-inf", now, start=0, num=BATCH))
                if not due:
                    break
                for raw in due:
                    moved += self._move(sorted_set, raw, now, owner)
                if len(due) < BATCH:
                    break
        return moved

    def _move(self, sorted_set: str, raw: bytes, now: float, owner: str | None = None) -> int:
        """Move one due entry to its queue (`owner` in Cluster mode: the queue whose set holds it)."""
        try:
            payload = decode(raw)
            queue = payload.get("queue") or "default"
            if not isinstance(queue, str):
                raise PayloadError(f"payload 'queue' is a {type(queue).__name__}")
        except PayloadError as exc:
            # Not a job: hand it to a queue as it is, where the processor files it in the dead set
            # with the reason. Leaving it would make the poller trip on it forever.
            log.error("due entry in %r is not a job (%s); queueing it unchanged", sorted_set, exc)
            queue, blob, lane = "default", raw, None
        else:
            blob, lane = due_entry(payload, now, self.config.sidekiq_version >= 8, self.scripts.keys,
                                   queue if owner is None else self._target(queue, owner))
        if owner is not None:  # Cluster mode: to its queue if in the set's slot (a retry_queue of its group)
            target = self._target(queue, owner)
            if target != owner:
                self.redis.sadd(keys.QUEUES, target)  # another slot than the move's: listed first
            moved = int(self.scripts.enqueue_due(keys=[sorted_set, self.scripts.keys.queue(target)],
                                                 args=[raw, blob, target, *(lane or ())]))
        else:
            moved = int(self.scripts.enqueue_due(keys=[sorted_set, keys.queue(queue), keys.QUEUES],
                                                 args=[raw, blob, queue, *(lane or ())]))
        if moved == 2:  # ENQUEUE_DUE: its lane's keys were set by hand to another type
            log.warning("job %s: the lanes of queue %r cannot take it (a key of another type); queued without "
                        "its group or priority", payload.get("jid") if lane else None, queue)
        return min(moved, 1)

    @staticmethod
    def _target(queue: str, owner: str) -> str:
        """Cluster mode: the queue a job of `owner`'s sets goes to (its own if in the same slot)."""
        return queue if keys.group_of(queue) == keys.group_of(owner) else owner

    def next_wait(self, sets: list[tuple[str, str | None]] | None = None) -> float:
        cap = self.config.poll_interval * (1 - 0.2 * self.rng.random())
        pipe = self.redis.pipeline(transaction=False)
        for sorted_set, _ in self.sets() if sets is None else sets:
            pipe.zrange(sorted_set, 0, 0, withscores=True)
        earliest: list[float] = [entry[0][1] for entry in pipe.execute() if entry]
        if not earliest:
            return cap
        return max(0.0, min(cap, min(earliest) - self.clock()))
