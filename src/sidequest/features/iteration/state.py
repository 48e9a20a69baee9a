"""The progress of one iterable job in Redis: `sidequest:iteration:<jid>`, a hash.

Fields: `cursor` (JSON, the cursor of the last item known handled; absent before the first), `state`
(running, interrupted, completed, cancelled), `executions` (slices started), `items` (items handled,
counted with each save: an item repeated after an unclean end counts once), `runtime` (seconds spent
in `each_iteration`), `class`, `updated_at` (epoch seconds). It lives `keys.ITERATION_TTL` after its
last save, and `keys.ITERATION_DONE_TTL` once the job has completed or been cancelled, so a copy of
the job run again after its end (a `kill -9` in the instant of its acknowledgement) finds it and
does nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis

from sidequest.store import keys

ENDED = ("completed", "cancelled")


@dataclass(frozen=True)
class IterationState:
    """What `sidequest:iteration:<jid>` holds, decoded."""

    jid: str
    cursor: Any  # None before the first item is saved
    state: str  # "new" when no record exists yet
    executions: int
    items: int
    runtime: float  # seconds in each_iteration, over every slice
    klass: str
    updated_at: float | None

    @property
    def per_item(self) -> float | None:
        """Mean seconds per handled item, or None before the first."""
        return self.runtime / self.items if self.items else None

    @property
    def cursor_text(self) -> str:
        """The cursor as JSON, for display ("" before the first item)."""
        return "" if self.cursor is None else json.dumps(self.cursor, separators=(",", ":"))

    def as_dict(self) -> dict[str, Any]:
        return {"jid": self.jid, "cursor": self.cursor, "state": self.state, "executions": self.executions,
                "items": self.items, "runtime": self.runtime, "per_item": self.per_item, "class": self.klass,
                "updated_at": self.updated_at}


def read_state(client: redis.Redis, jid: str) -> IterationState | None:
    """The progress of iterable job `jid`, or None if it has none (not iterable, or expired)."""
    return _decode(jid, cast("dict[bytes, bytes]", client.hgetall(keys.iteration(jid))))


def read_states(client: redis.Redis, jids: list[str]) -> dict[str, IterationState]:
    """The progress of each of `jids` that has one, in one round trip (the Busy page's read)."""
    pipe = client.pipeline(transaction=False)
    for jid in jids:
        pipe.hgetall(keys.iteration(jid))
    found = {jid: _decode(jid, raw) for jid, raw in zip(jids, pipe.execute(), strict=True)}
    return {jid: state for jid, state in found.items() if state is not None}


def _decode(jid: str, raw: dict[bytes, bytes]) -> IterationState | None:
    if not raw:
        return None
    text = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
    try:
        cursor = json.loads(text["cursor"]) if "cursor" in text else None
    except ValueError:
        cursor = None
    return IterationState(jid, cursor, text.get("state", "running"), int(text.get("executions", 0)),
                          int(text.get("items", 0)), float(text.get("runtime", 0.0)), text.get("class", ""),
                          float(text["updated_at"]) if "updated_at" in text else None)


class Store:
    """Reads and writes one job's record; every write refreshes its TTL in the same MULTI."""

    def __init__(self, client: redis.Redis, jid: str, klass: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.jid = jid
        self.key = keys.iteration(jid)
        self.klass = klass
        self.clock = clock

    def begin(self) -> IterationState:
        """The record as this slice finds it, then counted as one more execution."""
        state = read_state(self.redis, self.jid)
        if state is not None and state.state in ENDED:
            return state
        pipe = self.redis.pipeline()
        pipe.hincrby(self.key, "executions", 1)
        pipe.hset(self.key, mapping={"state": "running", "class": self.klass, "updated_at": self.clock()})
        pipe.expire(self.key, keys.ITERATION_TTL)
        pipe.execute()
        return state or IterationState(self.jid, None, "new", 0, 0, 0.0, self.klass, None)

    def save(self, cursor: Any, items: int, runtime: float, state: str = "running") -> bool:
        """Save the cursor with the items and seconds since the last save; True if the job has
        been cancelled meanwhile (the flag is read in the same round trip)."""
        pipe = self.redis.pipeline()
        pipe.hset(self.key, mapping={"state": state, "updated_at": self.clock()})
        if cursor is not None:
            pipe.hset(self.key, "cursor", json.dumps(cursor, separators=(",", ":")))
        if items:
            pipe.hincrby(self.key, "items", items)
            pipe.hincrbyfloat(self.key, "runtime", runtime)
        pipe.expire(self.key, keys.ITERATION_DONE_TTL if state in ENDED else keys.ITERATION_TTL)
        pipe.exists(keys.cancel_flag(self.jid))
        return bool(pipe.execute()[-1])
