"""The bulk actions on a search's matches: a call per match, BATCH per round trip (`act`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sidequest.api.actions import Actions, Call
from sidequest.api.records import JobRecord, SortedEntry
from sidequest.api.search.matching import Hit
from sidequest.errors import PayloadError

BATCH = 500  # atomic moves per round trip


def act(actions: Actions, items: Iterable[Any], build: Callable[[Any], Call | None]) -> int:
    """Build a call for each item (None, or PayloadError for bytes that are not a job: left as
    they are) and run them BATCH per round trip, each its own atomic move; how many moved."""
    moved = 0
    calls: list[Call] = []
    for item in items:
        try:
            call = build(item)
        except PayloadError:
            continue
        if call is not None:
            calls.append(call)
        if len(calls) >= BATCH:
            moved += sum(actions.many(calls))
            calls = []
    return moved + sum(actions.many(calls))


def _payload(record: JobRecord) -> dict[str, Any] | None:
    return None if record.invalid else record.item


def requeue(actions: Actions, hit: Hit) -> Call | None:
    entry = hit.record
    if not isinstance(entry, SortedEntry):
        return None
    return actions.requeue(entry.set_key, entry.value, _payload(entry), retry=hit.where != "scheduled", home=entry.home)


def delete(actions: Actions, hit: Hit) -> Call | None:
    entry = hit.record
    if isinstance(entry, SortedEntry):
        return actions.delete(entry.set_key, entry.value, _payload(entry))
    if hit.where == "queue":
        return actions.delete(actions.space.queue(entry.queue), entry.value, _payload(entry), where="1")
    return None


def kill(actions: Actions, hit: Hit) -> Call | None:
    entry = hit.record
    if not isinstance(entry, SortedEntry) or hit.where == "dead":
        return None
    return actions.kill(entry.set_key, entry.value, _payload(entry), entry.home)
