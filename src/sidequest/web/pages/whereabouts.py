"""Where one job is, from its jid alone, in a bounded number of Redis round trips: for the job page.

The finding itself is `features.lookup`'s (the results record, else a search in the order jobs
move: schedule, queues, running, retry, dead); this module only drives it, with two additions:

- **A bound.** A job that keeps no record is searched for with ZSCAN and LRANGE pages of 1,000
  entries, one key at a time; the page stops after one read per key it must look at (each queue's
  list, and in Cluster mode each queue's three sets) plus `SEARCH_STEPS` more (about 50,000
  entries), and says so: a page on a Redis holding a million jobs costs what one on a Redis with
  as many queues and 50,000 jobs costs, at most.
- **The stored entry.** The search returns a payload; the page's buttons need the exact entry
  (a set's `<score>-<jid>` key, a queue's bytes). The driver keeps, from the replies passing
  through it, the entries that hold the jid, so no second search finds them again.

A link from a set's page carries the entry's key (`?in=retries&key=...`): one ZRANGEBYSCORE, no
search. A link from a queue's page names the queue (`?queue=mail`): its list is searched first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sidequest.api import JobRecord, SortedEntry, Work, Workers
from sidequest.api.actions import Actions
from sidequest.api.records import parse
from sidequest.client.plugins import Command, Query
from sidequest.client.sync_client import Client
from sidequest.features import lookup
from sidequest.features.lookup import Found
from sidequest.store import keys
from sidequest.web.pages.sets import KINDS

T = TypeVar("T")
SEARCH_STEPS = 50  # round trips one page may spend on big keys, past one per key, searching for a job
KIND_OF_STATE = {"scheduled": "scheduled", "retry": "retries", "dead": "dead"}  # a state -> its set's path
STATE_OF_KIND = {kind: state for state, kind in KIND_OF_STATE.items()}
IN_REDIS = ("queued", "scheduled", "running", "retry", "dead")  # states with a payload stored somewhere


class SearchStopped(Exception):
    """The search spent its round trips without finding the job."""


@dataclass
class Whereabouts:
    """What the job page shows of where a job is."""

    state: str  # lookup's states: queued scheduled running retry dead done cancelled unknown
    job: JobRecord | None = None  # the stored job (a SortedEntry in a set), when found
    kind: str | None = None  # "scheduled", "retries" or "dead": the set it is in
    work: Work | None = None  # running: which process and thread, since when
    record: dict[str, str] = field(default_factory=dict)  # the results record (`result_ttl` jobs)
    stopped: bool = False  # the search reached SEARCH_STEPS before it found the job


class _Driver:
    """Runs lookup queries within one budget of round trips, keeping the stored entries that
    hold the jid (sorted-set members with their scores, list entries) from their replies."""

    def __init__(self, client: Client, jid: str, budget: int) -> None:
        self.client, self.jid, self.left = client, jid, budget
        self.needle = jid.encode("utf-8")
        self.members: list[tuple[bytes, float]] = []
        self.entries: list[bytes] = []

    def run(self, query: Query[T]) -> T:
        return lookup.run(self._bounded(query), self.client.redis)

    def _bounded(self, query: Query[T]) -> Query[T]:
        try:
            step = next(query)
            while True:
                if self.left <= 0:
                    query.close()
                    raise SearchStopped
                self.left -= 1
                replies = yield step
                self._keep(step, replies)
                step = query.send(replies)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _keep(self, step: list[Command], replies: list[Any]) -> None:
        for (name, _, _), reply in zip(step, replies, strict=True):
            if name == "zscan":
                self.members += [(m, s) for m, s in reply[1] if self.needle in m and self._names_jid(m)]
            elif name == "lrange":
                self.entries += [raw for raw in reply if self.needle in raw and self._names_jid(raw)]

    def _names_jid(self, raw: bytes) -> bool:
        return parse(raw)[0].get("jid") == self.jid


def locate(client: Client, jid: str, *, kind: str | None = None, key: str | None = None,
           queue: str | None = None) -> Whereabouts:
    """Where job `jid` is now (see the module docstring for the hints and the bound)."""
    if kind in KINDS and key:
        try:
            entry = KINDS[kind].open(client).get(key)
        except ValueError:
            entry = None
        if entry is not None and entry.jid == jid:
            return Whereabouts(STATE_OF_KIND[kind], job=entry, kind=kind)
    driver = _Driver(client, jid, _budget(client))
    try:
        found = _find(driver, jid, queue)
    except SearchStopped:
        return Whereabouts("unknown", stopped=True)
    record = {k: v.decode("utf-8", "replace") for k, v in (found.record or {}).items()}
    if found.state == "running":
        work = Workers(client).find_work(jid)
        return Whereabouts("running", job=work.job if work else _record_of(client, found), work=work, record=record)
    if found.state in KIND_OF_STATE:
        entry = _entry_of(client, driver, KIND_OF_STATE[found.state], jid)
        return Whereabouts(found.state, job=entry, kind=KIND_OF_STATE[found.state] if entry else None, record=record)
    if found.state == "queued":
        raw = driver.entries[0] if driver.entries else None
        job = JobRecord(raw, None, Actions(client)) if raw is not None else _record_of(client, found)
        return Whereabouts("queued", job=job, record=record)
    return Whereabouts(found.state, record=record)


def _budget(client: Client) -> int:
    """Round trips for one search: a read of each key it must look at, and SEARCH_STEPS more."""
    queues = int(client.redis.scard(keys.QUEUES))
    return SEARCH_STEPS + queues * (4 if client.keys.cluster else 1) + 5  # + the record, schedule, running...


def _find(driver: _Driver, jid: str, queue: str | None) -> Found:
    """lookup's answer; for a job with a record still somewhere in Redis, the search's too (the
    record holds no payload). A hinted queue is searched first, then every queue."""
    space, clock = driver.client.keys, driver.client.clock
    found = driver.run(lookup.status_query(jid, queue, clock, space))
    if found.state == "unknown" and queue is not None:
        found = driver.run(lookup.status_query(jid, None, clock, space))
    if found.record is not None and found.state in IN_REDIS:
        searched = driver.run(lookup.search(jid, queue, space))
        if searched.state == "unknown" and queue is not None:
            searched = driver.run(lookup.search(jid, None, space))
        if searched.payload is not None:
            return Found(searched.state, record=found.record, payload=searched.payload, queue=found.queue)
    return found


def _entry_of(client: Client, driver: _Driver, kind: str, jid: str) -> SortedEntry | None:
    """The set's entry the search saw, read again by its score (one ZRANGEBYSCORE)."""
    for _, score in driver.members:
        entries = KINDS[kind].open(client).fetch(score, jid)
        if entries:
            return entries[0]
    return None


def _record_of(client: Client, found: Found) -> JobRecord | None:
    """The payload the search found, as a record to show (its stored bytes were not kept)."""
    if found.payload is None:
        return None
    return JobRecord(json.dumps(found.payload).encode("utf-8"), None, Actions(client))

