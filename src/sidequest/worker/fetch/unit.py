"""A unit of work (one job a processor took) and the one call that ends its stay.

`UnitOfWork.apply(outcome)` writes the job's fate through its fetch; `Settler` is the SETTLE
script call both fetches share: it first removes the job from the reserved list it sits in
(`unit.home`) and writes nothing if it is gone because another process recovered the job while
this one was paused (its copy is the live one). A call sent again after its reply was lost finds
the job gone too, but no trace of a recovery: it reports the outcome as written, so the hooks
that follow a written outcome run once, and no false warning is logged. Basic fetch holds no
reserved copy (`home` None).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis

from sidequest.config import Config
from sidequest.store import faults, keys
from sidequest.store.direct import DirectPath, direct_path_for
from sidequest.store.scripts import Scripts
from sidequest.worker.lifecycle import has_ops
from sidequest.worker.outcome import Outcome

# outcome kind -> (SETTLE mode, destination key or None for the job's own queue, lifecycle point)
SETTLE_AS: dict[str, tuple[str, str | None, str]] = {
    "done": ("ack", keys.QUEUES, "finished"),
    "retry": ("retry", keys.RETRY, "retried"),
    "dead": ("dead", keys.DEAD, "dead"),
    "dropped": ("ack", keys.QUEUES, "dropped"),
    "put_back": ("queue", None, "put_back"),
    "snoozed": ("snooze", keys.SCHEDULE, "snoozed"),
    "cancelled": ("ack", keys.QUEUES, "cancelled"),
}


class UnitOfWork:
    """One job taken from a queue. It owns its end: the processor never touches keys."""

    __slots__ = ("_fetch", "_lock", "done", "home", "queue", "raw")

    def __init__(self, queue: str, raw: bytes, fetch: Fetch, home: str | None = None) -> None:
        self.queue = queue  # the queue name, without `queue:`
        self.raw = raw  # the payload exactly as it was in Redis
        self.home = home if home is not None else fetch.reserved  # its reserved list; None: basic fetch
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
    reserved: str | None  # where its units are held by default (None: basic fetch holds nothing)
    answered: bool  # the last retrieve_work got a reply from Redis (not only another processor's news)

    def retrieve_work(self) -> UnitOfWork | None: ...
    def apply(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool: ...
    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool: ...
    def flush(self) -> None: ...
    def lost_reply(self) -> None: ...
    def hand_back(self) -> None: ...
    def release(self) -> None: ...


class Settler:
    """Writes outcomes through the SETTLE script (shared by both fetches)."""

    def __init__(self, config: Config, client: redis.Redis, scripts: Scripts, clock: Callable[[], float],
                 lane: DirectPath | None = None) -> None:
        self.config = config
        self.redis = client
        self.scripts = scripts
        self.clock = clock
        self.lane = lane or direct_path_for(client)  # sent directly, as the batch calls are (see `store.direct`)

    def settle(self, unit: UnitOfWork, outcome: Outcome, ops: list[Any]) -> bool:
        mode, dest, point = SETTLE_AS[outcome.kind]
        blob = unit.raw if outcome.kind == "put_back" else (outcome.blob or b"")
        now = self.clock()
        space = self.scripts.keys
        if space.cluster:  # the queue's own sets, in its slot (see `keys.ClusterKeyspace`)
            in_slot = {"retry": space.retry, "dead": space.dead, "snooze": space.schedule}.get(mode, space.queue)
            dest = in_slot(unit.queue)
        return self._run(unit.home, unit.queue, unit.raw, mode, dest or space.queue(unit.queue), blob,
                         outcome.at or now, now, point, ops)

    def mark(self, unit: UnitOfWork, ops: list[Any]) -> bool:
        return self.written(self.lane.evalsha(self.scripts.settle, *self.mark_call(unit, ops)), unit.raw)

    @staticmethod
    def written(reply: Any, raw: bytes) -> bool:
        """What a SETTLE reply about the job `raw` says (written or not), the faults of its
        features' operations logged (`faults`); both runners read their replies here."""
        return bool(reply if isinstance(reply, int) else faults.settled(reply, raw))

    def mark_call(self, unit: UnitOfWork, ops: list[Any]) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of `mark`'s SETTLE call (the asyncio runner sends it on its loop)."""
        now = self.clock()
        return self._call(unit.home, unit.queue, unit.raw, "taken", "", b"", now, now, "taken", ops)

    def requeue(self, jobs: Sequence[tuple[str, bytes, str]]) -> None:
        """Put jobs that never ran (queue, payload, the reserved list holding it) back at the
        head of their queues, unchanged, with nothing recorded, in one round trip, the last
        given at the very head (jobs a process kept in hand too long, see `batch.BatchList`)."""
        now = self.clock()
        queue_of = self.scripts.keys.queue
        self.lane.evalsha_many(self.scripts.settle, [
            self._call(home, queue, raw, "queue", queue_of(queue), raw, now, now, "put_back", [0])
            for queue, raw, home in jobs])

    def _run(self, home: str | None, queue: str, raw: bytes, mode: str, dest: str, blob: bytes | str,
             score: float, now: float, point: str, ops: list[Any]) -> bool:
        """True when the outcome is written (now, or by an earlier attempt whose reply was lost)."""
        reply = self.lane.evalsha(self.scripts.settle, *self._call(home, queue, raw, mode, dest, blob,
                                                                    score, now, point, ops))
        return self.written(reply, raw)

    def _call(self, home: str | None, queue: str, raw: bytes, mode: str, dest: str, blob: bytes | str,
              score: float, now: float, point: str, ops: list[Any]) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of one SETTLE call."""
        cutoff = now - self.config.dead_timeout
        checked = "0" if home is None else "1"
        space = self.scripts.keys
        # a key declared but not written ('ack', 'taken', basic fetch): one in the job's slot
        unused = (home or space.queue(queue)) if space.cluster else keys.QUEUES
        trace = unused if home is None else space.recovered(space.identity_of_reserved(home), queue)
        return ([home or unused, dest or unused, trace],
                [checked, raw, mode, blob, repr(score), queue, repr(cutoff), self.config.dead_max_jobs,
                 repr(now), point, *ops])
