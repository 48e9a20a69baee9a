"""The sorted sets of jobs: `schedule`, `retry` and `dead` (Sidekiq's JobSet and its kinds).

A set can hold 100,000 entries, so nothing here loads a whole set for one request: iteration
and `page` read ranks newest first (ZREVRANGE, 50 at a time), `find_job` and the filters walk
the set with ZSCAN and a MATCH pattern, as Sidekiq's `find_job` and `scan` do (the server does
the matching; the job name or jid is checked again on the decoded payload). The "all" actions
walk the same way and move each entry with its own atomic call, 500 calls per round trip.

In Cluster mode (see `keys.ClusterKeyspace`) each queue has its own `schedule:{q}`, `retry:{q}`
and `dead:{q}`, and a set here is the union of those of every queue in `queues`: `size` adds up
their ZCARDs (one pipelined round trip), iteration and `page` merge them newest first (a page
from rank `offset` reads the first `offset + limit` of each, so deep pages cost more), `find_job`
and the filters scan each in turn. Each entry keeps the key of its queue's set and that queue
(`SortedEntry.home`), so its actions move it within its queue's slot.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, ClassVar, cast

from sidequest.api import search
from sidequest.api.actions import Actions, Call
from sidequest.api.records import SortedEntry
from sidequest.client.sync_client import Client, default_client
from sidequest.store import keys

PAGE = 50  # entries per read while iterating, as Sidekiq's


class JobSet:
    """A sorted set of jobs, newest (highest score) first; `soonest_first` says how people see it.

    ```python
    retries = RetrySet()
    retries.size
    for entry in retries: ...                         # newest first, 50 per round trip
    retries.page(0, 50)                               # one page, for a web view
    entry = retries.find_job("b4a577edbccf1d805744efa9")
    entry.retry() or entry.delete() or entry.kill()   # False: someone else moved it first
    retries.retry_all(name="SendWelcome")             # every entry of one job name
    retries.kill_all(text="Timeout")                  # every entry whose JSON holds the text
    ```
    """

    # the order the dashboard and the CLI list this set in, as Sidekiq's Web UI: the soonest first
    # where the score is when it runs next (retries, scheduled), the newest first where it is when
    # it died (dead)
    soonest_first: ClassVar[bool] = False

    def __init__(self, key: str, client: Client | None = None) -> None:
        self.key = key
        self.client = client or default_client()
        self.redis = self.client.redis
        self.actions = Actions(self.client)
        self.space = self.client.keys
        # per set key: entries this object's actions moved out of it (keeps iteration in place)
        self._left: Counter[str] = Counter()
        # Cluster mode: this set's name in a queue's slot (`retry` -> `retry:{q}`), None for a key of another kind
        self._per_queue: Callable[[str], str] | None = {
            keys.SCHEDULE: self.space.schedule, keys.RETRY: self.space.retry, keys.DEAD: self.space.dead,
        }.get(key) if self.space.cluster else None

    @property
    def name(self) -> str:
        """The set's key: `schedule`, `retry` or `dead` (Sidekiq's `name`)."""
        return self.key

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    def sets(self) -> list[tuple[str, str | None]]:
        """The sorted sets this set is made of, each with its queue: `[(key, None)]`, or in
        Cluster mode `[("retry:{q}", "q"), ...]` for every queue in `queues`, by name."""
        if self._per_queue is None:
            return [(self.key, None)]
        names = sorted(n.decode("utf-8", "replace") for n in cast("set[bytes]", self.redis.smembers(keys.QUEUES)))
        return [(self._per_queue(name), name) for name in names]

    @property
    def size(self) -> int:
        if self._per_queue is None:
            return self.redis.zcard(self.key)
        return sum(self._each_set(lambda pipe, key: pipe.zcard(key)))

    # -- reading -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[SortedEntry]:
        """Every entry, newest first. Live data: an entry moved by an action on an entry this
        iteration yielded does not shift it, but jobs added meanwhile may shift it by a few."""
        if self._per_queue is not None:
            yield from self._merged()
            return
        seen, left_at_start = 0, self._left[self.key]
        while True:
            entries = self.page(max(seen - (self._left[self.key] - left_at_start), 0), PAGE)
            if not entries:
                return
            yield from entries
            seen += len(entries)

    def _merged(self) -> Iterator[SortedEntry]:
        """Cluster mode: every queue's set, merged newest first, `PAGE` entries of a set per read
        (the first page of every set in one pipelined round trip)."""
        sets = self.sets()
        left_at_start = Counter(self._left)
        firsts = self._each_set(lambda pipe, key: pipe.zrevrange(key, 0, PAGE - 1, withscores=True), sets)
        buffers = [deque(cast("list[tuple[bytes, float]]", found)) for found in firsts]
        more = [len(found) == PAGE for found in firsts]
        taken = [0] * len(sets)
        heads = [(-buffer[0][1], i) for i, buffer in enumerate(buffers) if buffer]
        heapq.heapify(heads)
        while heads:
            _, i = heapq.heappop(heads)
            key, home = sets[i]
            value, score = buffers[i].popleft()
            taken[i] += 1
            yield self._entry(value, score, key, home)
            if not buffers[i] and more[i]:
                rank = max(taken[i] - (self._left[key] - left_at_start[key]), 0)
                found = cast("list[tuple[bytes, float]]",
                             self.redis.zrevrange(key, rank, rank + PAGE - 1, withscores=True))
                buffers[i].extend(found)
                more[i] = len(found) == PAGE
            if buffers[i]:
                heapq.heappush(heads, (-buffers[i][0][1], i))

    def page(self, offset: int = 0, limit: int = 50, *, soonest_first: bool = False) -> list[SortedEntry]:
        """`limit` entries from rank `offset`, newest first (lowest score first with
        `soonest_first`, as Sidekiq's retries and scheduled pages): O(log n + limit) (in Cluster
        mode, O(queues x (offset + limit)))."""
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        name = "zrange" if soonest_first else "zrevrange"
        if self._per_queue is not None:
            sets = self.sets()
            tops = self._each_set(lambda pipe, key: getattr(pipe, name)(key, 0, offset + limit - 1, withscores=True),
                                  sets)
            per_set = ([(value, score, key, home) for value, score in top]
                       for (key, home), top in zip(sets, tops, strict=True))
            sign = 1 if soonest_first else -1
            merged = heapq.merge(*per_set, key=lambda entry: sign * entry[1])  # ties: by queue name, as `_merged`
            return [self._entry(*entry) for entry in islice(merged, offset, offset + limit)]
        found = cast("list[tuple[bytes, float]]",
                     getattr(self.redis, name)(self.key, offset, offset + limit - 1, withscores=True))
        return [self._entry(value, score) for value, score in found]

    def fetch(self, score: float, jid: str | None = None) -> list[SortedEntry]:
        """The entries with exactly this score (epoch seconds as stored), of one jid if given."""
        if self._per_queue is not None:
            sets = self.sets()
            per_set = self._each_set(lambda pipe, key: pipe.zrangebyscore(key, score, score, withscores=True), sets)
            entries = [self._entry(value, at, key, home)
                       for (key, home), found in zip(sets, per_set, strict=True) for value, at in found]
        else:
            found = cast("list[tuple[bytes, float]]",
                         self.redis.zrangebyscore(self.key, score, score, withscores=True))
            entries = [self._entry(value, at) for value, at in found]
        return [e for e in entries if jid is None or e.jid == jid]

    def _each_set(self, command: Callable[[Any, str], object],
                  sets: list[tuple[str, str | None]] | None = None) -> list[Any]:
        """Cluster mode: one command on each of `sets` (default: `self.sets()`), in one pipelined
        round trip (redis-py sends each to its slot's primary); their replies in order."""
        pipe = self.redis.pipeline(transaction=False)
        for key, _ in sets if sets is not None else self.sets():
            command(pipe, key)
        return pipe.execute()

    def get(self, key: str) -> SortedEntry | None:
        """The entry named by `SortedEntry.key` (`<score>-<jid>`), or None if it is gone."""
        score, _, jid = key.rpartition("-")
        try:
            at = float(score)
        except ValueError:
            raise ValueError(f"{key!r} is not an entry key (<score>-<jid>)") from None
        entries = self.fetch(at, jid or None)
        return entries[0] if entries else None

    def find_job(self, jid: str) -> SortedEntry | None:
        """The entry of this jid, or None: a ZSCAN the server filters, never a full load."""
        for entry in self.select(text=jid):
            if entry.jid == jid:
                return entry
        return None

    def scan(self, text: str) -> Iterator[SortedEntry]:
        """Entries whose stored JSON contains `text` (Sidekiq's `scan`, without glob patterns)."""
        return self.select(text=text)

    def select(self, name: str | None = None, text: str | None = None) -> Iterator[SortedEntry]:
        """Entries of job name `name` (the payload's `class`, or the class it wraps, its
        `display_class`: an ActiveJob's) and/or whose stored JSON contains `text` (case-sensitive),
        in no particular order, each once; with neither, every entry. This is `Search` over this
        set alone (one matcher, one walk): one ZSCAN round trip per `SCAN_COUNT` entries."""
        kind = search.SET_KINDS.get(self.key, "set")
        criteria = search.Criteria(name=name or None, text=text or None)
        walk = [search.Place(kind, key, home) for key, home in self.sets()]
        for _, entry in search.walk(self.redis, criteria, walk, lambda place, value, score:
                                    self._entry(value, score or 0.0, place.key, place.queue)):
            yield cast("SortedEntry", entry)

    # -- acting on many ------------------------------------------------------------------------
    def retry_all(self, name: str | None = None, text: str | None = None) -> int:
        """Retry every entry (or those matching, see `select`); how many this call moved.
        Entries that are not jobs stay where they are."""
        return self._each(lambda e: self.actions.requeue(e.set_key, e.value, _payload(e), retry=True, home=e.home),
                          name, text)

    def add_all_to_queue(self, name: str | None = None, text: str | None = None) -> int:
        """Run every entry (or those matching) now, unchanged; how many this call moved."""
        return self._each(lambda e: self.actions.requeue(e.set_key, e.value, _payload(e), retry=False, home=e.home),
                          name, text)

    def kill_all(self, name: str | None = None, text: str | None = None) -> int:
        """Move every entry (or those matching) to the dead set; how many this call moved."""
        return self._each(lambda e: self.actions.kill(e.set_key, e.value, _payload(e), e.home), name, text)

    def delete_all(self, name: str | None = None, text: str | None = None) -> int:
        """Delete every entry (or those matching); how many this call deleted."""
        return self._each(lambda e: self.actions.delete(e.set_key, e.value, _payload(e)), name, text)

    def clear(self) -> int:
        """Delete every entry, each through the lifecycle (a task job's event says so)."""
        return self.delete_all()

    def _each(self, build: Callable[[SortedEntry], Call], name: str | None, text: str | None) -> int:
        return search.bulk.act(self.actions, self.select(name, text), build)

    def _entry(self, value: bytes, score: float, key: str | None = None, home: str | None = None) -> SortedEntry:
        key = key or self.key
        return SortedEntry(value, score, key, self.actions, lambda: self._note_left(key), home)

    def _note_left(self, key: str) -> None:
        self._left[key] += 1


def _payload(entry: SortedEntry) -> dict[str, Any] | None:
    return None if entry.invalid else entry.item


class ScheduledSet(JobSet):
    """`schedule`: jobs pushed with `perform_in`/`perform_at`; score = when they run."""

    soonest_first = True

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(keys.SCHEDULE, client)


class RetrySet(JobSet):
    """`retry`: failed jobs waiting for their next attempt; score = when it runs."""

    soonest_first = True

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(keys.RETRY, client)


class DeadSet(JobSet):
    """`dead`: jobs out of retries (kept `dead_timeout`, at most `dead_max_jobs`); score = death."""

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(keys.DEAD, client)
