"""Debounce and throttle: many pushes of "the same" job, one run.

    @sidequest.job(debounce=5, key=lambda account_id, **_: account_id)
    def reindex(account_id, reason): ...     # one run, 5 s after the last push, its arguments

    @sidequest.job(throttle=60)
    def notify(user_id): ...                 # at most one run a minute per user_id, the first push's

"The same" is the job's class, args, kwargs and queue (as `unique_for`'s digest), or with `key=`
the JSON value of `key(*args, **kwargs)` with the class and queue. The push computes the digest
(`flow_key` in the payload) and, in `prepare`, the record it checks; both are written in the
push's one script call (`unique.PUSH_UNIQUE`, the seam `unique_for` uses), so concurrent pushes
of one key from any number of clients settle atomically:

- debounce: `sidequest:debounce:<digest>` holds the pending run's payload. A push removes that
  member from the schedule (ZREM: it is still there unless it is already due and moved to its
  queue), counts it as replaced when it was, schedules itself at now + debounce and takes its
  place in the record. So one run is pending per key at any time, with the newest arguments,
  due `debounce` after the newest push. Each push returns its own jid; only the last one runs.
- throttle: `sidequest:throttle:<digest>` is taken with SET NX PX period, holding the jid let
  through: the first push of a period is written (now, or at its `at`), every other push of the
  period writes nothing, is counted as dropped and returns None (as a held `unique_for` claim).

The counts are per class, in `sidequest:flow:replaced` and `sidequest:flow:dropped` (in Cluster
mode per queue slot, beside the records): `sidequest.api.flow_counts()`. Nothing happens on the
worker side: a due debounced job is a plain scheduled job (a Ruby worker runs it too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sidequest.errors import JobArgumentError
from sidequest.features.unique import _CANONICAL, digest
from sidequest.jobs.options import seconds_option
from sidequest.store import keys

FLOW_SLACK = 600.0  # seconds a debounce record outlives its run's time: the poller moves it before
KINDS = (("debounce", "d", "replaced"), ("throttle", "t", "dropped"))  # option, script's code, what is counted


def check(base: dict[str, Any], key: Callable[..., Any] | None, count: int, times: list[float | None],
          rails: bool = False) -> str | None:
    """The flow option of a push ("debounce", "throttle" or None), refused in one line where it
    cannot apply. `base`: its checked payload fields; `count`: how many jobs; `times`: theirs;
    `rails`: an `active_job=True` job (its arguments are wrapped with a fresh job_id each push)."""
    chosen = [option for option, _, _ in KINDS if seconds_option(base.get(option)) is not None]
    if not chosen:
        if key is not None and "debounce" not in base and "throttle" not in base:  # not turned off for a push
            raise JobArgumentError("option 'key' says which pushes are the same for debounce or throttle; "
                                   "give the job debounce=... or throttle=... too, or drop key")
        return None
    if len(chosen) > 1:
        raise JobArgumentError("give a job debounce or throttle, not both (debounce runs the last push of a burst, "
                               "throttle the first of a period)")
    if seconds_option(base.get("unique_for")) is not None:
        raise JobArgumentError(f"{chosen[0]} and unique_for cannot be combined: {chosen[0]} already decides which "
                               "push runs; push it with unique_for=None")
    if count != 1:
        raise JobArgumentError(f"{chosen[0]} applies to single pushes (perform_async), not a bulk push: push the "
                               "jobs one by one")
    if rails:
        raise JobArgumentError(f"{chosen[0]} is not available for an active_job=True job (Rails' wrapper gives each "
                               "push its own job_id); push it without")
    if chosen[0] == "debounce" and times[0] is not None:
        raise JobArgumentError("a debounced job runs debounce seconds after its last push, so it takes no at or in_: "
                               "push it with perform_async, or set a longer debounce")
    return chosen[0]


def flow_digest(name: str, args: list[Any], queue: str, kwargs: dict[str, Any] | None,
                key: Callable[..., Any] | None) -> str:
    """What counts as the same push: `unique.digest` of the job, or with `key` of its value."""
    if key is None:
        return digest(name, args, queue, kwargs)
    value = key(*args, **(kwargs or {}))
    try:
        text = _CANONICAL.encode([name, queue, value])
    except (TypeError, ValueError, RecursionError):
        raise JobArgumentError(f"the key function of job {name!r} returned {value!r}, which is not JSON; "
                               "return a str, number or list of them") from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def claim(payload: dict[str, Any], now: float, space: keys.Keyspace = keys.DEFAULT
          ) -> tuple[str, int, str, str, str] | None:
    """For a payload about to be pushed with `flow_key`, what `unique.PUSH_UNIQUE` takes in a
    claim's place: its record's key and milliseconds, its flow code, counts key and class; None
    when it has no flow option (turned off for this push)."""
    queue, name = str(payload["queue"]), str(payload["class"])
    for option, code, counted in KINDS:
        seconds = seconds_option(payload.get(option))
        if seconds is not None:
            hold = seconds + FLOW_SLACK if option == "debounce" else seconds
            record = space.flow(option, queue, str(payload["flow_key"]))
            return record, max(int(hold * 1000), 1), code, space.flow(counted, queue), name
    return None
