"""Cancelling a job by its jid: removed from where it waits, or asked to stop where it runs.

    sidequest.cancel(jid)              # True if the job was found, False if not

    @sidequest.job
    def export(report_id):
        for chunk in chunks(report_id):
            if sidequest.cancelled():    # cheap: at most one Redis read per 0.5 s
                raise sidequest.Cancelled()
            write(chunk)

`cancel` looks where a job can be, in the order a job moves through them, so a job that moves
on meanwhile is met further along: `schedule` and `retry` (ZSCAN MATCH on the jid, as Sidekiq's
`find_job`), the lanes of every queue named in `queues` (`lanes`: a job pushed with a group or
a priority waits there before its queue), every queue (LRANGE from the head, 1,000 at a time: workers
taking from the tail cannot make the walk skip one), then the running jobs (every reserved list
in `sidequest:reservations`, and every live process's `<identity>:work` hash, for basic fetch).

A waiting job is removed by one atomic call on its exact entry, which also runs the
lifecycle's `cancelled` operations (a task job's event becomes "error", message "cancelled"),
so it never runs. A running job cannot be stopped from outside (Python cannot stop a thread):
`cancel` sets `sidequest:cancel:<jid>` for `FLAG_TTL`, and the job's own `cancelled()` sees it.
Cooperative, like Sidekiq's iterable jobs: a job that never asks runs to its end. A job that
raises `Cancelled` ends as cancelled: acknowledged, no retry, no dead entry, not a failure.

In Cluster mode (see `keys.ClusterKeyspace`) the same walk looks at each queue's own sets
(`schedule:{q}`, `retry:{q}`) and list, and at the reserved lists indexed in each queue's
`sidequest:reservations:{q}`, for every queue in `queues`; the removal is the same one call, in
the queue's slot, and the flag a key of its own.

Cost: a cancel reads the sets with ZSCAN and the queues in full when the job is not waiting
(running, or unknown): O(jobs waiting), in pages, never blocking Redis. Cancel by jid is an
operator's tool, not a hot path. A job caught in the instant of a move from running back to
`retry` or `schedule` can be missed (False); calling `cancel` again finds it.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, cast

import redis

from sidequest.client.sync_client import Client, default_client
from sidequest.errors import PayloadError
from sidequest.jobs.payload import decode
from sidequest.store import faults, keys, lanes
from sidequest.store.lanes import ADMIN_DELETE_LANED
from sidequest.store.reasons import reason
from sidequest.store.scripts import ADMIN_DELETE, core_lib
from sidequest.worker.lifecycle import operator_lifecycle
from sidequest.worker.outcome import Outcome
from sidequest.worker.processor import job_context

log = logging.getLogger(__name__)

FLAG_TTL = 24 * 3600  # seconds the flag of a running job is kept (a job put back and run again sees it)
CHECK_EVERY = 0.5  # seconds `cancelled()` trusts its last answer
PAGE = 1000  # queue entries read per LRANGE, set entries per ZSCAN


def cancel(jid: str, client: Client | None = None) -> bool:
    """Cancel the job `jid`: remove it if it waits (in a queue, `schedule` or `retry`), or flag
    it if it runs. True if it was found, False if no such job waits or runs."""
    return Canceller(client or default_client()).cancel(jid)


class Canceller:
    """Finds a job by jid and cancels it (see the module), on one client."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.redis = client.redis
        self.space = client.keys
        self.lifecycle = operator_lifecycle(client)
        lib = core_lib(self.lifecycle.lua, self.space.cluster)
        self._delete = self.redis.register_script(lib + ADMIN_DELETE)
        self._delete_laned = self.redis.register_script(lib + ADMIN_DELETE_LANED)

    def cancel(self, jid: str) -> bool:
        if not isinstance(jid, str) or not jid:
            return False
        needle = jid.encode("utf-8")
        names = self._queues() if self.space.cluster else None  # else read only once the sets are looked at
        sources = ([self.space.schedule(q) for q in names] + [self.space.retry(q) for q in names]
                   if names is not None else [keys.SCHEDULE, keys.RETRY])
        for source in sources:
            if self._from_set(source, jid, needle):
                return True
        names = self._queues() if names is None else names
        return (self._from_lanes(names, jid, needle) or self._from_queues(names, jid, needle)
                or self._flag_running(names, jid, needle))

    def _queues(self) -> list[str]:
        return sorted(n.decode() for n in cast("set[bytes]", self.redis.smembers(keys.QUEUES)))

    def _remove(self, source: str, value: bytes, payload: dict[str, Any], where: str) -> bool:
        """Remove this exact entry (one copy, from a list) with the `cancelled` operations."""
        ops = self.lifecycle.ops("cancelled", payload)
        removed = self._delete(keys=[source], args=[value, where, self.client.clock(), "cancelled", *ops])
        return int(faults.settled(removed, value)) == 1

    def _from_set(self, source: str, jid: str, needle: bytes) -> bool:
        pattern = f"*{_glob_escape(jid)}*"
        for value, _score in self.redis.zscan_iter(source, match=pattern, count=PAGE):
            payload = _job_of(value, jid, needle)
            if payload is not None and self._remove(source, value, payload, "zset"):
                return True  # else the poller moved it meanwhile: the queues are looked at next
        return False

    def _from_lanes(self, names: list[str], jid: str, needle: bytes) -> bool:
        """A laned job still in its lane (`lanes`): removed there, its lane's counts kept true."""
        for name in names:
            base = self.space.lanes(name)
            for level, group, key in lanes.waiting_lanes(self.redis, base):
                for value in self._pages(key):
                    payload = _job_of(value, jid, needle)
                    if payload is None:
                        continue
                    ops = self.lifecycle.ops("cancelled", payload)
                    removed = self._delete_laned(keys=[key], args=[value, base, level, group, self.client.clock(),
                                                                   "cancelled", *ops])
                    if int(faults.settled(removed, value)) == 1:
                        return True  # else it was staged meanwhile: the queue is looked at next
        return False

    def _pages(self, key: str) -> Iterator[bytes]:
        """A list's entries from index 0 (the newest: pushes LPUSH), PAGE at a time."""
        start = 0
        while True:
            page = cast("list[bytes]", self.redis.lrange(key, start, start + PAGE - 1))
            yield from page
            if len(page) < PAGE:
                return
            start += PAGE

    def _from_queues(self, names: list[str], jid: str, needle: bytes) -> bool:
        for name in names:
            key = self.space.queue(name)
            for value in self._pages(key):
                payload = _job_of(value, jid, needle)
                if payload is not None and self._remove(key, value, payload, "1"):
                    return True  # else a worker took it meanwhile: it is looked for as running
        return False

    def _flag_running(self, names: list[str], jid: str, needle: bytes) -> bool:
        reserved = sorted(k.decode() for k in self._reserved_lists(names))
        processes = sorted(p.decode() for p in cast("set[bytes]", self.redis.smembers(keys.PROCESSES)))
        pipe = self.redis.pipeline(transaction=False)
        for key in reserved:
            pipe.lrange(key, 0, -1)
        for identity in processes:
            pipe.hvals(keys.work(identity))
        found = False
        for values in pipe.execute():
            for value in values:
                if needle in value and (_job_of(value, jid, needle) or _work_of(value, jid)):
                    found = True
        if found:
            self.redis.set(keys.cancel_flag(jid), "1", ex=FLAG_TTL)
        return found


    def _reserved_lists(self, names: list[str]) -> set[bytes]:
        """Every reserved list's key: the one index, or in Cluster mode each queue's."""
        if not self.space.cluster:
            return cast("set[bytes]", self.redis.smembers(keys.RESERVATIONS))
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.smembers(self.space.reservations(name))
        return set().union(*pipe.execute()) if names else set()


def _glob_escape(text: str) -> str:
    """`text` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


def _job_of(value: bytes, jid: str, needle: bytes) -> dict[str, Any] | None:
    """The payload in `value` if it is the job `jid` (not a job whose args mention it)."""
    if needle not in value:
        return None
    try:
        payload = decode(value)
    except PayloadError:
        return None
    return payload if payload.get("jid") == jid else None


def _work_of(value: bytes, jid: str) -> bool:
    """True if `value`, an entry of a `<identity>:work` hash, is the running job `jid`."""
    try:
        entry = json.loads(value)
        payload = entry.get("payload") if isinstance(entry, dict) else None
        if isinstance(payload, str):
            payload = json.loads(payload)
    except (ValueError, RecursionError):
        return False
    return isinstance(payload, dict) and payload.get("jid") == jid


# -- inside a job --------------------------------------------------------------------------------
class _Watch:
    """The cancel flag of one run of a job, read at most once per `every` s; made at the run's
    first `cancelled()` (nothing is made for a job that never asks)."""

    __slots__ = ("_failing", "_seen", "_until", "clock", "every", "jid", "redis", "run")

    def __init__(self, feature: CancelFeature, run: tuple[Any, ...]) -> None:
        self.redis = feature.redis
        self.clock = feature.clock
        self.every = feature.every
        self.run = run  # the run's `job_context` value: a new one each run
        self.jid = run[1]
        self._until = 0.0
        self._seen = False
        self._failing = False

    def cancelled(self) -> bool:
        if self._seen:
            return True
        now = self.clock()
        if now < self._until:
            return False
        self._until = now + self.every
        try:
            self._seen = bool(self.redis.exists(keys.cancel_flag(self.jid)))
        except (redis.RedisError, OSError) as exc:  # a job polling through an outage carries on
            if not self._failing:
                log.warning("could not read the cancel flag (%s); treating the job as not cancelled", reason(exc))
            self._failing = True
            return False
        self._failing = False
        return self._seen


# The worker's feature, for the jobs run in this context (set as a job starts; never reset, so a
# processor thread sets it once), and the watch of the run that last asked.
_feature: contextvars.ContextVar[CancelFeature | None] = contextvars.ContextVar("sidequest_cancel", default=None)
_watch: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar("sidequest_cancel_watch", default=None)


def cancelled() -> bool:
    """True once the running job has been cancelled (`sidequest.cancel(jid)`); raise
    `sidequest.Cancelled` then to end it as cancelled. Cached for 0.5 s, so calling it in a
    tight loop costs about two Redis reads a second. False outside a job."""
    feature, run = _feature.get(), job_context.get()
    if feature is None or run is None or not run[1]:
        return False
    watch = _watch.get()
    if watch is None or watch.run is not run:
        watch = _Watch(feature, run)
        _watch.set(watch)
    return watch.cancelled()


class _Scope:
    """What `CancelFeature.running` returns for every job: entering it names the feature."""

    __slots__ = ("feature",)

    def __init__(self, feature: CancelFeature) -> None:
        self.feature = feature

    def __enter__(self) -> None:
        if _feature.get() is not self.feature:
            _feature.set(self.feature)

    def __exit__(self, *exc_info: object) -> None:
        """Left set: `cancelled()` outside a job finds no `job_context`."""


class CancelFeature:
    """Lets the running job read its cancel flag (`cancelled()`), on the worker's own Redis.

    Writes nothing per job, and makes nothing: entering `running` names this feature in the
    job's context, and a job that asks `cancelled()` reads its flag."""

    name = "cancel"
    marks: frozenset[str] | None = frozenset()  # ops only for payloads with these keys
    observes, wraps = False, True  # whether `observe` and `running` ever do anything
    lua = ""

    def __init__(self, client: redis.Redis, clock: Callable[[], float] = time.monotonic,
                 every: float = CHECK_EVERY) -> None:
        self.redis = client
        self.clock = clock
        self.every = every
        self._scope = _Scope(self)

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Nothing to count."""

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return self._scope
