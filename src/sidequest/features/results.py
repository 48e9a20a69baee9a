"""Recording a job's state and return value by jid, for jobs pushed with `result_ttl`.

    @sidequest.job(result_ttl=3600)
    def price(sku): return {"sku": sku, "eur": 12.5}

    jid = price.perform_async("A-1")
    sidequest.status(jid)                # 'queued', then 'running', then 'done'
    sidequest.result(jid, timeout=10)    # {'sku': 'A-1', 'eur': 12.5}

This module writes the record; `lookup` reads it. The record is the hash `sidequest:status:<jid>`:

    state          queued | scheduled | waiting | running | retry | dead | done | cancelled
    at             when a scheduled, waiting or retrying job is due (epoch seconds)
    result         the return value, as JSON (done)
    result_error   why the return value was not kept: not native JSON, or too large (done)
    error_class, error_message   the last failure (retry, dead)
    reason         a few words on a dead or cancelled end ("retry=False", "killed by an operator")
    updated_at     when the state was written

The push writes `queued` or `scheduled` in its own MULTI (or script, for unique jobs); every
later change is `StatusFeature`'s operation inside the atomic call that moves the job (see
`lifecycle`), so the record never disagrees with where the job is. Each write keeps the hash
`result_ttl` seconds, plus the wait for a job due later. A job without `result_ttl` writes
nothing here: plain jobs cost nothing.

Two moves run no lifecycle operation: the poller moving a due job from `schedule` or `retry`
to its queue. So a `scheduled` or `retry` record whose time has passed reads as `queued`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sidequest.errors import WAITING, JobArgumentError
from sidequest.jobs.options import seconds_option
from sidequest.jobs.payload import check_json_value
from sidequest.store import keys
from sidequest.worker.outcome import Outcome, error_class_name

log = logging.getLogger(__name__)

STATES = ("queued", "scheduled", "waiting", "running", "retry", "dead", "done", "cancelled", "unknown")
ENDED = ("done", "dead", "cancelled")
# The state a job is in after each point of its life ('deleted' removes the record); see `lifecycle`.
STATE_AT = {"taken": "running", "finished": "done", "retried": "retry", "dead": "dead", "dropped": "dead",
            "put_back": "queued", "requeued": "queued", "snoozed": "scheduled", "cancelled": "cancelled",
            "killed": "dead", "deleted": "deleted"}
REASONS = {"killed": "killed by an operator", "cancelled": "cancelled"}
MAX_MESSAGE = 10_000
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# The status feature's operation: args status key (sidequest:status:<jid>), ms to keep it, notify
# key (sidequest:status:<jid>:notify), state, then field, value pairs. The hash is rewritten whole;
# state 'deleted' removes it. The notify list holds one token while the job has ended (done, dead,
# cancelled, deleted) and none otherwise, so a waiter blocked on it (BLMOVE of the list onto
# itself, which leaves the token for the next) wakes at the end.
STATUS_FEATURE = """
FEATURES['status'] = function(point, now, a)
  local state = a[4]
  redis.call('del', a[1], a[3])
  if state ~= 'deleted' then
    redis.call('hset', a[1], 'state', state, 'updated_at', now, unpack(a, 5))
    redis.call('pexpire', a[1], a[2])
  end
  if state == 'done' or state == 'dead' or state == 'cancelled' or state == 'deleted' then
    redis.call('rpush', a[3], '1')
    redis.call('pexpire', a[3], a[2])
  end
end
"""


def at_push(payload: dict[str, Any], when: float | None, now: float,
            space: keys.Keyspace = keys.DEFAULT) -> tuple[str, int, str, str] | None:
    """(status key, milliseconds to keep it, state, due time) for a payload about to be pushed,
    or None when it keeps no record (no `result_ttl`)."""
    keep = seconds_option(payload.get("result_ttl"))
    if keep is None:
        return None
    key = space.status(payload["jid"], str(payload["queue"]))  # beside the job in Cluster mode
    if when is None:
        return key, int(keep * 1000), "queued", ""
    return key, int((keep + max(when - now, 0.0)) * 1000), "scheduled", repr(when)


class StatusFeature:
    """Writes the record of a `result_ttl` job at every point of its life (see the module docstring).

    `max_size` bounds a kept return value (bytes of JSON), as `max_payload_size` bounds a payload.
    """

    name = "status"
    marks: frozenset[str] | None = frozenset({"result_ttl"})  # ops only for payloads with these keys
    observes, wraps = False, False  # whether `observe` and `running` ever do anything
    lua = STATUS_FEATURE

    def __init__(self, clock: Callable[[], float] = time.time, max_size: int = 16 * 1024 * 1024,
                 space: keys.Keyspace = keys.DEFAULT) -> None:
        self.clock = clock
        self.max_size = max_size
        self.space = space  # in Cluster mode the record is in its job's queue slot

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        keep, jid = seconds_option(payload.get("result_ttl")), payload.get("jid")
        if keep is None or not isinstance(jid, str):
            return None
        state = STATE_AT.get(point)
        if point == "snoozed" and WAITING in payload:  # parked by a durable sleep or wait
            state = "waiting"
        if point == "recovered":
            state = "dead" if outcome is not None and outcome.kind == "dead" else "queued"
        if state is None:
            return None
        now = self.clock()
        fields: list[Any] = []
        if state in ("scheduled", "waiting", "retry") and outcome is not None and outcome.at is not None:
            fields += ["at", repr(outcome.at)]
            keep += max(outcome.at - now, 0.0)
        if state in ("retry", "dead"):
            fields += _error(payload, outcome)
        if state in ("dead", "cancelled"):
            reason = (outcome.reason if outcome is not None else "") or REASONS.get(point, "")
            if reason:
                fields += ["reason", reason]
        if state == "done":
            fields += self._result(payload, outcome)
        queue = str(payload.get("queue"))
        return [self.space.status(jid, queue), max(int(keep * 1000), 1), self.space.status_notify(jid, queue), state,
                *fields]

    def _result(self, payload: dict[str, Any], outcome: Outcome | None) -> list[Any]:
        """["result", JSON] or, when the value cannot be kept, ["result_error", why] (logged)."""
        value = outcome.result if outcome is not None else None
        try:
            check_json_value(value, "the return value")
            blob = _ENCODER.encode(value).encode("utf-8")
        except (JobArgumentError, UnicodeEncodeError, ValueError, TypeError) as exc:
            problem = str(exc)
        else:
            if len(blob) <= self.max_size:
                return ["result", blob]
            problem = f"the return value is {len(blob):,} bytes of JSON, over the limit of {self.max_size:,}"
        log.error("%s %s is done, but its return value is not kept (result() will say so): %s",
                  payload.get("class"), payload.get("jid"), problem)
        return ["result_error", problem]

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""


def _error(payload: dict[str, Any], outcome: Outcome | None) -> list[Any]:
    """The last failure: the exception of this run, else what the payload carries (a recovery, a kill)."""
    exc = outcome.error if outcome is not None else None
    if exc is not None:
        return ["error_class", error_class_name(exc), "error_message", str(exc)[:MAX_MESSAGE]]
    fields: list[Any] = []
    for name in ("error_class", "error_message"):
        if isinstance(payload.get(name), str):
            fields += [name, payload[name][:MAX_MESSAGE]]
    return fields
