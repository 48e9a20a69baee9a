"""Unique jobs: one pending or running copy per class, arguments and queue.

    @sidequest.job(unique_for=3600)
    def refresh(account_id): ...

    refresh.perform_async(7)      # -> jid
    refresh.perform_async(7)      # -> None: the first copy holds the claim; nothing is written

A push of a job with `unique_for` first takes a claim, `sidequest:unique:<digest>` holding its
jid, where the digest is the SHA-256 of the canonical JSON of `[class, args, queue]` (with
`kwargs` last when the job has keyword arguments). The claim is taken with `SET NX PX` in the
same script call that writes the job (`client.push_script.PUSH_UNIQUE`, given the claim by `claim`,
registered in the client's seam `client.plugins`), so among concurrent pushes exactly
one writes; the others write nothing and return None. The digest travels in the payload
(`unique_digest`), so a worker releases the very claim the push took even if the job moves to
its `retry_queue`.

The claim expires after `unique_for` seconds (plus the delay, for a scheduled job) whatever
happens; before that, `UniqueFeature` ends it through the job lifecycle (see `lifecycle`) in
the atomic call that files the job: when it succeeds, dies, is dropped, cancelled, deleted or
killed by an operator, and already when it starts with `unique_until="start"`. A retry, a
snooze, a shutdown or a recovery keeps it: the job is still pending. Ending a claim checks that
it still holds this job's jid, so a copy whose claim expired never frees a later copy's claim.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from typing import Any

from sidequest.jobs.options import seconds_option
from sidequest.store import keys
from sidequest.worker.outcome import Outcome

# Points where a job stops being pending (see `lifecycle.POINTS`); 'taken' too with unique_until="start".
RELEASED_AT = frozenset({"finished", "dead", "dropped", "cancelled", "deleted", "killed"})
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# The unique feature's operation: args claim key (sidequest:unique:<digest>), jid. End the claim
# only while it is this job's: once it expired, a later copy may hold it.
UNIQUE_FEATURE = """
FEATURES['unique'] = function(point, now, a)
  if redis.call('get', a[1]) == a[2] then redis.call('del', a[1]) end
end
"""


def digest(name: str, args: list[Any], queue: str, kwargs: dict[str, Any] | None = None) -> str:
    """The claim's name for a job: SHA-256 of the canonical JSON of `[class, args, queue]`, with
    its keyword arguments `[class, args, queue, kwargs]` when it has some.

    >>> digest("Refresh", [7], "default") == digest("Refresh", [7], "default")
    True
    """
    shown = [name, args, queue, kwargs] if kwargs else [name, args, queue]
    text = _CANONICAL.encode(shown)  # args were checked at push; a bad one fails here too
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def claim(payload: dict[str, Any], when: float | None, now: float,
          space: keys.Keyspace = keys.DEFAULT) -> tuple[str, int] | None:
    """(claim key, milliseconds to hold it) for a payload about to be pushed, or None if it is not
    unique. Stores the digest in the payload. A scheduled job holds its claim until `unique_for`
    after its time, as Sidekiq Enterprise does."""
    hold = seconds_option(payload.get("unique_for"))
    if hold is None:
        return None
    payload["unique_digest"] = key = digest(str(payload["class"]), payload["args"], str(payload["queue"]),
                                            payload.get("kwargs"))
    delay = max(when - now, 0.0) if when is not None else 0.0
    return space.unique(key, str(payload["queue"])), max(int((hold + delay) * 1000), 1)


class UniqueFeature:
    """Ends a unique job's claim where the job stops being pending (see the module docstring)."""

    name = "unique"
    marks: frozenset[str] | None = frozenset({"unique_digest"})  # ops only for payloads with these keys
    observes, wraps = False, False  # whether `observe` and `running` ever do anything
    lua = UNIQUE_FEATURE

    def __init__(self, space: keys.Keyspace = keys.DEFAULT) -> None:
        self.space = space  # in Cluster mode a claim lives in its queue's slot

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        key, jid = payload.get("unique_digest"), payload.get("jid")
        if not isinstance(key, str) or not key or not isinstance(jid, str):
            return None
        claim = self.space.unique(key, str(payload.get("queue")))
        if point in RELEASED_AT or (point == "taken" and payload.get("unique_until") == "start"):
            return [claim, jid]
        if point == "recovered" and outcome is not None and outcome.kind == "dead":
            return [claim, jid]  # past max_recoveries: it will not run again
        return None

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""
