"""Group slots that heal: give back a slot whose job is nowhere.

A group's slot (`B:running:<group>`, see `lanes`) is taken when its job is staged and given back
when sidequest settles the job's end. Its owner is the job itself, wherever it is: staged in
`queue:<q>`, reserved by a process (`sidequest:reservations` names every reserved list, a dead
process's too until recovery puts its jobs back at the head of their queue, still counted), or
running under basic fetch or in a Ruby worker (the process's `<identity>:work` hash, written at
each heartbeat). A job that leaves all of these without sidequest settling it (`kill -9` under
basic fetch, a Ruby worker that ran it, a `Queue#clear` from Ruby, a hand `DEL`) would hold its
slot for good: `SlotReconciler` finds such jids and gives their slots back.

A job can be nowhere for a moment while it is held (taken by basic fetch or Ruby and not yet in
its process's work hash, written once a heartbeat), so a jid is given back only once it was
found nowhere on two passes at least `grace` apart (two heartbeats, and at least Sidekiq's 5 s).

Each read is bounded (a page of a list, one group's set); a pass reads, per queue: its busy
groups' running sets, the queue's list (until every held jid is found or the list ends), then
the reserved lists and every process's work hash: in the direction jobs move, so a job taken
meanwhile is seen in one place or the other. In Cluster mode these keys are in several slots
(a queue's in its own, `processes` and the work hashes in theirs), so a pass is a sequence of
reads, never one script; the give-back itself is one script in the queue's slot
(`RELEASE_SLOTS`), which gives back only jids still held.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from sidequest.store import keys
from sidequest.store.lanes import LaneKeys
from sidequest.store.lanes.admin import RELEASE_SLOTS

log = logging.getLogger(__name__)

PAGE = 1000  # list entries read by one call
SIDEKIQ_BEAT = 5.0  # Ruby Sidekiq writes its work hash every 5 s

Held = dict[tuple[str, str], set[str]]  # (queue, group) -> jids holding a slot


class SlotReconciler:
    """Finds group slots whose job is nowhere and gives them back (see the module)."""

    def __init__(self, client: Any, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = client
        self.space = keys.space(client)
        self.grace = grace
        self.clock = clock
        self.missing: dict[tuple[str, str, str], float] = {}  # (queue, group, jid) -> first found nowhere
        self.release = client.register_script(RELEASE_SLOTS)

    def run(self, queues: Iterable[str]) -> int:
        """One pass over `queues`; how many slots were given back. What was found missing in
        other queues is kept for their next pass (a caller may look at some queues in turn)."""
        looked = set(queues)
        elsewhere = {key: first for key, first in self.missing.items() if key[0] not in looked}
        held = self.held(sorted(looked))
        if not held:
            self.missing = elsewhere
            return 0
        holding = sorted({queue for queue, _ in held})
        seen: set[str] = set()
        for queue in holding:  # first the queues, then where their jobs go: a job moving meanwhile is seen
            seen |= self.queued_jids(queue, {jid for (q, _), jids in held.items() if q == queue for jid in jids})
        seen |= self.reserved_jids(holding) | self.working_jids()
        released = self._give_back(held, seen)
        self.missing.update(elsewhere)
        return released

    def held(self, queues: Iterable[str]) -> Held:
        """The jids holding a slot, per queue and group: two round trips per queue."""
        found: Held = {}
        for queue in queues:
            lane = LaneKeys(self.space.lanes(queue))
            groups = sorted(_text(g) for g in cast("set[bytes]", self.redis.smembers(lane.busy)))
            if not groups:
                continue
            pipe = self.redis.pipeline(transaction=False)
            for group in groups:
                pipe.smembers(lane.running(group))
            for group, jids in zip(groups, pipe.execute(), strict=True):
                if jids:
                    found[(queue, group)] = {_text(j) for j in jids}
        return found

    def reserved_jids(self, queues: list[str]) -> set[str]:
        """Jids in every reserved list (live or dead processes'), read a page at a time."""
        indexes = sorted({self.space.reservations(queue) for queue in queues})
        lists = sorted({_text(k) for index in indexes for k in cast("set[bytes]", self.redis.smembers(index))})
        return {jid for key in lists for jid in self._list_jids(key, None)}

    def working_jids(self) -> set[str]:
        """Jids in every registered process's work hash (sidequest's and Ruby Sidekiq's)."""
        identities = sorted(_text(m) for m in cast("set[bytes]", self.redis.smembers(keys.PROCESSES)))
        found: set[str] = set()
        for identity in identities:
            for key in (keys.work(identity), keys.workers(identity)):
                found |= {jid for raw in cast("list[bytes]", self.redis.hvals(key)) if (jid := _work_jid(raw))}
        return found

    def queued_jids(self, queue: str, wanted: set[str]) -> set[str]:
        """Those of `wanted` in the queue's list."""
        return self._list_jids(self.space.queue(queue), wanted) if wanted else set()

    def _list_jids(self, key: str, wanted: set[str] | None) -> set[str]:
        """Jids of a list's jobs, a page a call; with `wanted`, only those, stopping once all are
        found. From index 0 (the end pushes add to), as `Queue.find_job` reads: jobs taken at the
        other end meanwhile cannot make the walk skip one."""
        found: set[str] = set()
        start = 0
        while True:
            page = cast("list[bytes]", self.redis.lrange(key, start, start + PAGE - 1))
            for raw in page:
                if wanted is None or any(jid.encode() in raw for jid in wanted - found):  # a cheap look first
                    jid = _jid(raw)
                    if jid is not None and (wanted is None or jid in wanted):
                        found.add(jid)
            if len(page) < PAGE or (wanted is not None and found >= wanted):
                return found
            start += PAGE

    def _give_back(self, held: Held, seen: set[str]) -> int:
        now, released = self.clock(), 0
        still: dict[tuple[str, str, str], float] = {}
        for (queue, group), jids in sorted(held.items()):
            due = []
            for jid in sorted(jids - seen):
                first = self.missing.get((queue, group, jid), now)
                if now - first >= self.grace:
                    due.append(jid)
                else:
                    still[(queue, group, jid)] = first
            if due:
                released += self._release(queue, group, due)
        self.missing = still
        return released

    def _release(self, queue: str, group: str, jids: list[str]) -> int:
        lane = self.space.lanes(queue)
        given = 0
        for start in range(0, len(jids), 100):  # a call's work stays bounded
            given += int(self.release(keys=[lane, self.space.queue(queue)], args=[group, *jids[start:start + 100]]))
        if given:
            log.warning("queue %r group %r: gave back %d slot(s) whose job is nowhere (ended outside a sidequest "
                        "worker, or lost with its process): %s", queue, group, given, " ".join(jids[:5]))
        return given


def grace_of(heartbeat_interval: float) -> float:
    """How long a held jid must be found nowhere before its slot is given back: two heartbeats
    (sidequest's, and Ruby Sidekiq's 5 s), the longest a running job may be in no work hash."""
    return 2 * max(heartbeat_interval, SIDEKIQ_BEAT)


def _jid(raw: bytes) -> str | None:
    try:
        payload = json.loads(raw)
    except ValueError:
        return None
    jid = payload.get("jid") if isinstance(payload, dict) else None
    return jid if isinstance(jid, str) else None


def _work_jid(raw: bytes) -> str | None:
    """The jid of a work hash's entry: {"queue", "payload", "run_at"}, its payload a JSON string
    (Sidekiq 7+, sidequest) or an object (Sidekiq 6)."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    payload = entry.get("payload") if isinstance(entry, dict) else None
    if isinstance(payload, str):
        return _jid(payload.encode("utf-8", "surrogatepass"))
    jid = payload.get("jid") if isinstance(payload, dict) else None
    return jid if isinstance(jid, str) else None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
