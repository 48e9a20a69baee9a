"""A queue as an operator sees it: size, latency, its jobs, clear, pause (Sidekiq's `Queue`).

Jobs are read newest first (the head of `queue:<name>`, where pushes land; workers take from
the tail), 50 per round trip. Pausing adds the name to `sidequest:paused`, which every worker
reads at most a second apart (see `queue_order.PausedQueues`), so a paused queue is skipped by every
worker within about a second, and its jobs wait. Ruby Sidekiq workers do not read that set.
In Cluster mode the list is `queue:{<name>}` (see `keys.ClusterKeyspace`), on the primary of its slot.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from sidequest.api.actions import Actions
from sidequest.api.groups import clear_lanes
from sidequest.api.records import JobRecord, epoch_of, parse
from sidequest.client.sync_client import Client, default_client
from sidequest.store import keys

PAGE = 50  # entries per read while iterating, as Sidekiq's
FIND_PAGE = 1000  # entries per read while looking for one jid
CLEAR_BATCH = 500  # deletes per round trip in `clear`


class Queue:
    """One queue.

    ```python
    queue = Queue("mail")
    queue.size, queue.latency, queue.paused
    queue.pause(); queue.unpause()
    for job in queue: ...            # newest first
    queue.find_job(jid).delete()     # False if a worker took it first
    queue.clear()                    # every job, each through the lifecycle
    ```
    """

    def __init__(self, name: str = "default", client: Client | None = None) -> None:
        self.name = name
        self.client = client or default_client()
        self.key = self.client.keys.queue(name)
        self.redis = self.client.redis
        self.actions = Actions(self.client)
        self._left = 0  # jobs this object's actions removed (keeps iteration in place)

    @classmethod
    def all(cls, client: Client | None = None) -> list[Queue]:
        """Every known queue (the `queues` set), sorted by name."""
        chosen = client or default_client()
        names = cast("set[bytes]", chosen.redis.smembers(keys.QUEUES))
        return [cls(name, chosen) for name in sorted(n.decode("utf-8", "replace") for n in names)]

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    @property
    def size(self) -> int:
        return self.redis.llen(self.key)

    @property
    def latency(self) -> float:
        """Seconds the oldest job has waited since it was enqueued; 0.0 for an empty queue."""
        oldest = cast("bytes | None", self.redis.lindex(self.key, -1))
        return latency_of(oldest, self.client.clock())

    @property
    def paused(self) -> bool:
        return bool(self.redis.sismember(keys.PAUSED, self.name))

    def pause(self) -> None:
        """Every sidequest worker skips this queue within about a second; its jobs wait."""
        self.redis.sadd(keys.PAUSED, self.name)

    def unpause(self) -> None:
        self.redis.srem(keys.PAUSED, self.name)

    # -- jobs --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[JobRecord]:
        """Every job, newest first. Live data: a job deleted through a yielded record does not
        shift the walk; jobs pushed meanwhile may shift it by a few."""
        seen, left_at_start = 0, self._left
        while True:
            jobs = self.page(max(seen - (self._left - left_at_start), 0), PAGE)
            if not jobs:
                return
            yield from jobs
            seen += len(jobs)

    def page(self, offset: int = 0, limit: int = 50) -> list[JobRecord]:
        """`limit` jobs from position `offset`, newest first."""
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        values = cast("list[bytes]", self.redis.lrange(self.key, offset, offset + limit - 1))
        return [self._record(value) for value in values]

    def find_job(self, jid: str) -> JobRecord | None:
        """The job of this jid, or None, read 1,000 at a time from the head (slow on a long
        queue, as Sidekiq warns). From the head, workers taking jobs at the tail cannot make
        the walk skip one; a push meanwhile only makes it read a few twice."""
        needle = jid.encode("utf-8")
        start = 0
        while True:
            values = cast("list[bytes]", self.redis.lrange(self.key, start, start + FIND_PAGE - 1))
            for value in values:
                if needle in value:
                    record = self._record(value)
                    if record.jid == jid:
                        return record
            if len(values) < FIND_PAGE:
                return None
            start += FIND_PAGE

    def clear(self) -> int:
        """Delete every job, oldest first, each with its own atomic call (so a task job's event
        says so), and drop the name from `queues` once empty (in Cluster mode, once its
        scheduled, retry and dead jobs are gone too: see `Actions.forget_queue`); how many this
        call deleted. Jobs pushed while it runs may survive it. The queue's lanes (laned jobs
        not yet staged, see `groups`) go first, in one call, so staging cannot refill it."""
        deleted = clear_lanes(self.name, self.client)
        budget = self.size
        while budget > 0:
            values = cast("list[bytes]", self.redis.lrange(self.key, -CLEAR_BATCH, -1))
            if not values:
                break
            budget -= len(values)
            calls = []
            for value in values:
                item, invalid = parse(value)
                calls.append(self.actions.delete(self.key, value, None if invalid else item, where="-1"))
            deleted += sum(self.actions.many(calls))
        self.actions.forget_queue(self.name)
        return deleted

    def _record(self, value: bytes) -> JobRecord:
        return JobRecord(value, self.name, self.actions, self._note_left)

    def _note_left(self) -> None:
        self._left += 1


def latency_of(oldest: bytes | None, now: float) -> float:
    """Seconds since the job `oldest` was enqueued (Sidekiq's Queue#latency); 0.0 without one."""
    if oldest is None:
        return 0.0
    item, _ = parse(oldest)
    enqueued = epoch_of(item.get("enqueued_at"))
    return 0.0 if enqueued is None else now - enqueued
