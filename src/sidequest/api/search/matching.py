"""What matches and where it is read: `Criteria`, the places (`Place`, `places`), the walk one
Redis read at a time (`steps`, `walk`) and its cursors. See `api.search` for the whole story."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sidequest.api.records import JobDict, JobRecord, glob_escape
from sidequest.client.sync_client import Client
from sidequest.store import keys
from sidequest.store.lanes import waiting_lanes

PLACES = ("queue", "lane", "scheduled", "retry", "dead")  # in the order a page walks them
SET_KINDS = {keys.SCHEDULE: "scheduled", keys.RETRY: "retry", keys.DEAD: "dead"}
SCAN_COUNT = 5000  # ZSCAN COUNT: how much of a set the server walks per round trip
LIST_PAGE = 2000  # list entries per LRANGE


def _escaped(text: str) -> str:
    """`text` as it appears inside a JSON string (quotes and backslashes escaped; UTF-8 as is)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


@dataclass(frozen=True)
class Criteria:
    """What a job must be to match; every field given must hold (all None: every job)."""

    name: str | None = None  # its display class or its stored class, exactly
    jid: str | None = None
    args: str | None = None  # a text in its arguments (an ActiveJob's own), as JSON
    text: str | None = None  # a text anywhere in its stored JSON (case-sensitive)
    error: str | None = None  # a text in its error class or its error message
    queue: str | None = None  # its queue, exactly

    def needle(self) -> str | None:
        """The text the stored bytes must contain, the most selective first: the server's MATCH."""
        for text in (self.jid, self.args and _escaped(self.args), self.text, self.error and _escaped(self.error),
                     self.name and _escaped(self.name)):
            if text:
                return text
        return None

    def pattern(self) -> str | None:
        needle = self.needle()
        return f"*{glob_escape(needle)}*" if needle else None

    def matches(self, record: JobRecord) -> bool:
        """Whether a record read from Redis matches (its bytes already contain `needle()`)."""
        if self.text is not None and self.text.encode("utf-8") not in record.value:
            return False
        if self.jid is not None and record.jid != self.jid:
            return False
        if self.name is not None and self.name not in (record.klass, record.display_class):
            return False
        if self.queue is not None and record.queue != self.queue:
            return False
        if self.error is not None and not any(self.error in (found or "")
                                              for found in (record.error_class, record.error_message)):
            return False
        return self.args is None or _escaped(self.args) in _args_json(record)


def _args_json(record: JobRecord) -> str:
    return json.dumps([record.display_args, record.kwargs], ensure_ascii=False)


@dataclass(frozen=True)
class Place:
    """One key a search reads: its kind (one of PLACES, or "set" for another sorted set), the key,
    and the queue it belongs to (a queue's list or lanes; in Cluster mode its sets too)."""

    where: str
    key: str
    queue: str | None = None

    @property
    def order(self) -> tuple[int, str]:
        return (PLACES.index(self.where) if self.where in PLACES else len(PLACES), self.key)

    @property
    def sorted(self) -> bool:
        return self.where not in ("queue", "lane")


@dataclass(frozen=True)
class Hit:
    """One match: where it was found and the record (a `SortedEntry` in a sorted set)."""

    where: str
    record: JobRecord

    def as_dict(self) -> dict[str, Any]:
        found: JobDict = self.record.as_dict()
        return {"where": self.where, **found}


Make = Callable[[Place, bytes, float | None], JobRecord]


def places(client: Client, where: Iterable[str] = PLACES, queue: str | None = None) -> list[Place]:
    """The keys to read, in walk order: the queues in `queues` (or `queue` alone), their lanes with
    waiting jobs, and the sorted sets (in Cluster mode, those of each queue)."""
    wanted, space = set(where), client.keys
    names = [queue] if queue is not None else sorted(
        n.decode("utf-8", "replace") for n in cast("set[bytes]", client.redis.smembers(keys.QUEUES)))
    found = [Place("queue", space.queue(n), n) for n in names] if "queue" in wanted else []
    if "lane" in wanted:
        found += [Place("lane", lane, n) for n in names for _, _, lane in waiting_lanes(client.redis, space.lanes(n))]
    for key, kind in SET_KINDS.items():
        if kind in wanted:
            per_queue = {"scheduled": space.schedule, "retry": space.retry, "dead": space.dead}[kind]
            found += [Place(kind, per_queue(n), n) for n in names] if space.cluster else [Place(kind, key)]
    return sorted(found, key=lambda p: p.order)


def encode_cursor(place: Place, position: int) -> str:
    raw = json.dumps([*place.order, position]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[tuple[int, str], int]:
    """(place order, position) from `encode_cursor`; ValueError for anything else."""
    try:
        rank, key, position = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(rank, int) and isinstance(key, str) and isinstance(position, int) and position >= 0:
            return (rank, key), position
    except (ValueError, TypeError, binascii.Error):
        pass
    raise ValueError(f"{cursor[:40]!r} is not a search cursor (pass back a page's `cursor` as it came)")


Step = tuple[Place, int | None, int, list[JobRecord]]  # place, position after (None: its end), read, matches


def steps(redis: Any, criteria: Criteria, walk: Sequence[Place], make: Make,
          start: tuple[tuple[int, str], int] | None = None) -> Iterator[Step]:
    """The walk, one Redis read at a time, from `start` (a decoded cursor) or the beginning."""
    pattern, needle = criteria.pattern(), (criteria.needle() or "").encode("utf-8")
    for place in walk:
        if start is not None and place.order < start[0]:
            continue
        position = start[1] if start is not None and place.order == start[0] else 0
        while True:
            read, position_after, found = _read(redis, place, position, pattern)
            matches = [record for record in (make(place, value, score) for value, score in found
                                             if needle in value) if criteria.matches(record)]
            yield place, position_after, read, matches
            if position_after is None:
                break
            position = position_after


def _read(redis: Any, place: Place, position: int, pattern: str | None) -> tuple[int, int | None,
                                                                                 list[tuple[bytes, float | None]]]:
    """One read of a place from `position`: (entries read, the next position or None, entries)."""
    if place.sorted:
        cursor, found = cast("tuple[int, list[tuple[bytes, float]]]",
                             redis.zscan(place.key, position, match=pattern, count=SCAN_COUNT))
        return SCAN_COUNT, (int(cursor) or None), [(value, score) for value, score in found]
    values = cast("list[bytes]", redis.lrange(place.key, position, position + LIST_PAGE - 1))
    more = position + LIST_PAGE if len(values) == LIST_PAGE else None
    return len(values), more, [(value, None) for value in values]


def walk(redis: Any, criteria: Criteria, walk: Sequence[Place], make: Make) -> Iterator[tuple[Place, JobRecord]]:
    """Every match of a whole walk, once each: an entry read twice (ZSCAN may return one twice,
    a list read from its head repeats what a push shifted) is passed over."""
    seen: set[tuple[str, bytes]] = set()
    for place, _, _, matches in steps(redis, criteria, walk, make):
        for record in matches:
            digest = (place.key, hashlib.blake2b(record.value, digest_size=16).digest())
            if digest not in seen:
                seen.add(digest)
                yield place, record
