"""The sorted sets of jobs: `schedule`, `retry` and `dead` (Sidekiq's JobSet and its kinds).

A set can hold 100,000 entries, so nothing here loads a whole set for one request: iteration
and `page` read ranks newest first (ZREVRANGE, 50 at a time), `find_job` and the filters walk
the set with ZSCAN and a MATCH pattern, as Sidekiq's `find_job` and `scan` do (the server does
the matching; the job name or jid is checked again on the decoded payload). The "all" actions
walk the same way and move each entry with its own atomic call, 500 calls per round trip.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any, cast

from .. import keys
from ..client import Client, default_client
from ..errors import PayloadError
from .actions import Actions, Call
from .records import SortedEntry, glob_escape

PAGE = 50  # entries per read while iterating, as Sidekiq's
SCAN_COUNT = 5000  # ZSCAN COUNT: how much of the set the server walks per round trip
BATCH = 500  # atomic moves per round trip in the "all" actions


class JobSet:
    """A sorted set of jobs, newest (highest score) first.

        retries = RetrySet()
        retries.size
        for entry in retries: ...                         # newest first, 50 per round trip
        retries.page(0, 50)                               # one page, for a web view
        entry = retries.find_job("b4a577edbccf1d805744efa9")
        entry.retry() or entry.delete() or entry.kill()   # False: someone else moved it first
        retries.retry_all(name="SendWelcome")             # every entry of one job name
        retries.kill_all(text="Timeout")                  # every entry whose JSON holds the text
    """

    def __init__(self, key: str, client: Client | None = None) -> None:
        self.key = key
        self.client = client or default_client()
        self.redis = self.client.redis
        self.actions = Actions(self.client)
        self._left = 0  # entries this object's actions moved out of the set (keeps iteration in place)

    @property
    def name(self) -> str:
        """The set's key: `schedule`, `retry` or `dead` (Sidekiq's `name`)."""
        return self.key

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    @property
    def size(self) -> int:
        return self.redis.zcard(self.key)

    # -- reading -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[SortedEntry]:
        """Every entry, newest first. Live data: an entry moved by an action on an entry this
        iteration yielded does not shift it, but jobs added meanwhile may shift it by a few."""
        seen, left_at_start = 0, self._left
        while True:
            entries = self.page(max(seen - (self._left - left_at_start), 0), PAGE)
            if not entries:
                return
            yield from entries
            seen += len(entries)

    def page(self, offset: int = 0, limit: int = 50) -> list[SortedEntry]:
        """`limit` entries from rank `offset`, newest first: O(log n + limit)."""
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        found = cast("list[tuple[bytes, float]]",
                     self.redis.zrevrange(self.key, offset, offset + limit - 1, withscores=True))
        return [self._entry(value, score) for value, score in found]

    def fetch(self, score: float, jid: str | None = None) -> list[SortedEntry]:
        """The entries with exactly this score (epoch seconds as stored), of one jid if given."""
        found = cast("list[tuple[bytes, float]]",
                     self.redis.zrangebyscore(self.key, score, score, withscores=True))
        entries = [self._entry(value, at) for value, at in found]
        return [e for e in entries if jid is None or e.jid == jid]

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
        """Entries of job name `name` and/or whose stored JSON contains `text` (case-sensitive),
        in no particular order; with neither, every entry. One ZSCAN round trip per
        `SCAN_COUNT` entries of the set; an entry may come twice if the set changes meanwhile."""
        needle = text if text is not None else (json.dumps(name, ensure_ascii=False)[1:-1] if name else None)
        pattern = f"*{glob_escape(needle)}*" if needle else None
        wanted = text.encode("utf-8") if text else None
        cursor = 0
        while True:
            cursor, found = cast("tuple[int, list[tuple[bytes, float]]]",
                                 self.redis.zscan(self.key, cursor, match=pattern, count=SCAN_COUNT))
            for value, score in found:
                if wanted is not None and wanted not in value:
                    continue
                entry = self._entry(value, score)
                if name is None or entry.klass == name:
                    yield entry
            if cursor == 0:
                return

    # -- acting on many ------------------------------------------------------------------------
    def retry_all(self, name: str | None = None, text: str | None = None) -> int:
        """Retry every entry (or those matching, see `select`); how many this call moved.
        Entries that are not jobs stay where they are."""
        return self._each(lambda e: self.actions.requeue(self.key, e.value, _payload(e), retry=True), name, text)

    def add_all_to_queue(self, name: str | None = None, text: str | None = None) -> int:
        """Run every entry (or those matching) now, unchanged; how many this call moved."""
        return self._each(lambda e: self.actions.requeue(self.key, e.value, _payload(e), retry=False), name, text)

    def kill_all(self, name: str | None = None, text: str | None = None) -> int:
        """Move every entry (or those matching) to the dead set; how many this call moved."""
        return self._each(lambda e: self.actions.kill(self.key, e.value, _payload(e)), name, text)

    def delete_all(self, name: str | None = None, text: str | None = None) -> int:
        """Delete every entry (or those matching); how many this call deleted."""
        return self._each(lambda e: self.actions.delete(self.key, e.value, _payload(e)), name, text)

    def clear(self) -> int:
        """Delete every entry, each through the lifecycle (a task job's event says so)."""
        return self.delete_all()

    def _each(self, build: Callable[[SortedEntry], Call], name: str | None, text: str | None) -> int:
        moved = 0
        seen: set[bytes] = set()  # digests: ZSCAN may return an entry twice
        calls: list[Call] = []
        for entry in self.select(name, text):
            digest = hashlib.blake2b(entry.value, digest_size=16).digest()
            if digest in seen:
                continue
            seen.add(digest)
            try:
                calls.append(build(entry))
            except PayloadError:
                continue  # not a job: it has no queue to go to
            if len(calls) >= BATCH:
                moved += sum(self.actions.many(calls))
                calls = []
        return moved + sum(self.actions.many(calls))

    def _entry(self, value: bytes, score: float) -> SortedEntry:
        return SortedEntry(value, score, self.key, self.actions, self._note_left)

    def _note_left(self) -> None:
        self._left += 1


def _payload(entry: SortedEntry) -> dict[str, Any] | None:
    return None if entry.invalid else entry.item


class ScheduledSet(JobSet):
    """`schedule`: jobs pushed with `perform_in`/`perform_at`; score = when they run."""

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(keys.SCHEDULE, client)


class RetrySet(JobSet):
    """`retry`: failed jobs waiting for their next attempt; score = when it runs."""

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(keys.RETRY, client)


class DeadSet(JobSet):
    """`dead`: jobs out of retries (kept `dead_timeout`, at most `dead_max_jobs`); score = death."""

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(keys.DEAD, client)
