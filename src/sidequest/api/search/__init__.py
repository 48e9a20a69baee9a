"""One search over every place a job waits: its queue, its queue's lanes, `schedule`, `retry`, `dead`.

    from sidequest.api import Search

    search = Search(name="SendInvoice", args="customer-42")   # display class and argument text
    page = search.page()                  # the first matches, `page.cursor` for the next page
    page = search.page(page.cursor)       # None when the walk has reached the end
    for hit in search: ...                # every match, page after page (hit.where, hit.record)
    search.retry_all()                    # retry / dead: retried; scheduled: run now

A `Criteria` says what matches: a display class (the payload's `class`, or the class it wraps,
an ActiveJob's), a jid, a text in the arguments (as JSON, so a string matches without its
quotes), a text in the stored JSON, a text in the error class or message, a queue. Every given
field must match. The per-set filter (`JobSet.select`, the dashboard's Retries/Scheduled/Dead
filter, the CLI's `--class`/`--grep`) is this search over one set: one matcher, one walk.

What a page costs: each place is read in order (queues by name, then their lanes, then
`schedule`, `retry`, `dead`), a sorted set by ZSCAN with a MATCH pattern (the server skips
what cannot match), a list by LRANGE from its head. A page stops after `limit` matches or after
reading about `budget` entries, whichever comes first, so a page costs at most `budget` entries
read however few match; its cursor names the place and the position reached, and the caller
stops whenever it likes (nothing is held between pages). A page may hold more than `limit`
matches (those of its last read). Live data: an entry that stays put is found once per walk by
`Search.__iter__`; across pages a sorted set keeps ZSCAN's promise (every entry present
throughout is returned, maybe twice), and a list read from its head sees a job pushed meanwhile
shift the rest by one (read twice, never skipped).

In Cluster mode (`keys.ClusterKeyspace`) every queue has its own `schedule:{q}`, `retry:{q}`
and `dead:{q}` and lanes, in its slot: the places are those of every queue in `queues`, each
read on the primary that holds it (redis-py routes by key), one place after another.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sidequest.api.actions import Actions
from sidequest.api.records import JobRecord, SortedEntry
from sidequest.api.search import bulk
from sidequest.api.search.matching import (
    PLACES,
    SET_KINDS,
    Criteria,
    Hit,
    Place,
    decode_cursor,
    encode_cursor,
    places,
    steps,
    walk,
)
from sidequest.client.sync_client import Client, default_client

__all__ = ["PLACES", "SET_KINDS", "Criteria", "Hit", "Place", "Search", "SearchPage", "places", "walk"]

BUDGET = 100_000  # entries one page reads at most


@dataclass(frozen=True)
class SearchPage:
    """A page of matches; `cursor` resumes the walk (None: it reached the end); `read`: entries read."""

    hits: list[Hit]
    cursor: str | None
    read: int


class Search:
    """Jobs matching `Criteria` in the places `where` (default: all of PLACES), see the module."""

    def __init__(self, *, name: str | None = None, jid: str | None = None, args: str | None = None,
                 text: str | None = None, error: str | None = None, queue: str | None = None,
                 where: Iterable[str] = PLACES, client: Client | None = None) -> None:
        self.criteria = Criteria(name or None, jid or None, args or None, text or None, error or None, queue or None)
        self.where = tuple(where)
        self.client = client or default_client()
        self.actions = Actions(self.client)
        unknown = set(self.where) - set(PLACES)
        if unknown:  # refused now, not at the first page
            raise ValueError(f"unknown place {sorted(unknown)[0]!r}: use any of {', '.join(PLACES)}")

    def page(self, cursor: str | None = None, limit: int = 50, budget: int = BUDGET) -> SearchPage:
        """The next matches from `cursor` (None: the start): at least `limit` unless the walk ends
        or has read `budget` entries first; read only what is needed (see the module)."""
        if limit < 1 or budget < 1:
            raise ValueError("limit and budget must be >= 1")
        start = decode_cursor(cursor) if cursor else None
        hits: list[Hit] = []
        read = 0
        walk = places(self.client, self.where, self.criteria.queue)
        for place, position, count, matches in steps(self.client.redis, self.criteria, walk, self._make, start):
            hits += [Hit(place.where, record) for record in matches]
            read += count
            if position is not None and (len(hits) >= limit or read >= budget):
                return SearchPage(hits, encode_cursor(place, position), read)
        return SearchPage(hits, None, read)

    def __iter__(self) -> Iterator[Hit]:
        """Every match, once each (see `walk`), from the start to the end."""
        found = places(self.client, self.where, self.criteria.queue)
        for place, record in walk(self.client.redis, self.criteria, found, self._make):
            yield Hit(place.where, record)

    def _make(self, place: Place, value: bytes, score: float | None) -> JobRecord:
        if score is None:
            return JobRecord(value, place.queue, self.actions)
        home = place.queue if self.client.keys.cluster else None
        return SortedEntry(value, score, place.key, self.actions, home=home)

    # -- acting on every match -------------------------------------------------------------------
    def retry_all(self) -> int:
        """Retry every match in `retry` or `dead` (one `retry_count` lower, as a manual retry), run
        every match in `schedule` now; how many this call moved. Jobs in a queue or a lane stay."""
        return bulk.act(self.actions, self, lambda hit: bulk.requeue(self.actions, hit))

    def delete_all(self) -> int:
        """Delete every match in a queue or a sorted set; how many this call deleted. Jobs still in
        their lanes stay (cancel them: `sidequest.cancel(jid)`)."""
        return bulk.act(self.actions, self, lambda hit: bulk.delete(self.actions, hit))

    def kill_all(self) -> int:
        """Move every match in `schedule` or `retry` to the dead set; how many this call moved."""
        return bulk.act(self.actions, self, lambda hit: bulk.kill(self.actions, hit))
