"""Debounce and throttle: many pushes of "the same" job, one run.

    @sidequest.job(debounce=5, key=lambda account_id, **_: account_id)
    def reindex(account_id, reason): ...     # one run, 5 s after the last push, its arguments

    @sidequest.job(throttle=60)
    def notify(user_id): ...                 # at most one run a minute per user_id, the first push's

"The same" is the job's class, args, kwargs and queue (as `unique_for`'s digest), or with `key=`
the JSON value of `key(*args, **kwargs)` with the class and queue. The push computes the digest
(`flow_key` in the payload) and, in `prepare`, the record it checks; both are written in the
push's one script call (`client.push_script.PUSH_UNIQUE`, as `unique_for`'s claim; `shape` and
`claim` are this feature's part of a push, registered in `client.plugins`), so concurrent pushes
of one key from any number of clients settle atomically:

- debounce: `sidequest:debounce:<digest>` holds the pending run's payload. A push removes that
  member from the schedule (ZREM: it is still there unless it is already due and moved to its
  queue), counts it as replaced when it was, schedules itself at now + debounce and takes its
  place in the record. So one run is pending per key at any time, with the newest arguments,
  due `debounce` after the newest push. Each push returns its own jid; only the last one runs.
  The record has no TTL: its run may wait in `schedule` for as long as no poller runs (a deploy,
  a fleet scaled to zero), and a record that expired before its run left would let the next
  push add a second run. It belongs to its run instead: `FlowFeature` deletes it where a worker
  takes that run (or an operator deletes or kills it); a record whose run a Ruby worker took
  stays until the key's next push overwrites it (one key per debounce key, never a second run).
- throttle: `sidequest:throttle:<digest>` is taken with SET NX PX period, holding the jid let
  through: the first push of a period is written (now, or at its `at`), every other push of the
  period writes nothing, is counted as dropped and returns None (as a held `unique_for` claim).

The counts are per class, in `sidequest:flow:replaced` and `sidequest:flow:dropped` (in Cluster
mode per queue slot, beside the records): `sidequest.api.flow_counts()`. A due debounced job is
a plain scheduled job (a Ruby worker runs it too); a sidequest worker only ends its record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from sidequest.client.plugins import Stamp, Times, declared_options
from sidequest.errors import JobArgumentError
from sidequest.features.unique import _CANONICAL, digest
from sidequest.jobs.options import seconds_option
from sidequest.store import keys
from sidequest.worker.outcome import Outcome

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


def shape(job: Any, base: dict[str, Any], options: Mapping[str, Any], times: Times, now: float
          ) -> tuple[Times, Stamp | None]:
    """This feature's part of a push that names debounce, throttle or key (`plugins.Shape`): the
    push checked (`check`), a debounced one scheduled `debounce` after now, and what marks each
    payload with its `flow_key` (None: no flow option)."""
    key = options.get("key") or declared_options(job).get("key")
    flowing = check(base, key, len(times), times, getattr(job, "active_job", False) is True)
    if flowing is None:
        return times, None
    if flowing == "debounce":  # each push (re)schedules the one run: debounce after it
        times = [now + float(base["debounce"])]

    def stamp(payload: dict[str, Any], args: list[Any], kwargs: dict[str, Any] | None) -> None:
        payload["flow_key"] = flow_digest(payload["class"], args, payload["queue"], kwargs, key)

    return times, stamp


def claim(payload: dict[str, Any], when: float | None, now: float, space: keys.Keyspace = keys.DEFAULT
          ) -> tuple[str, int, str, str, str] | None:
    """For a payload about to be pushed with `flow_key`, what `push_script.PUSH_UNIQUE` takes in a
    claim's place: its record's key and milliseconds (0 for a debounce record: it lives as long
    as its run, see the module), its flow code, counts key and class; None when it has no flow
    option (turned off for this push)."""
    queue, name = str(payload["queue"]), str(payload["class"])
    for option, code, counted in KINDS:
        seconds = seconds_option(payload.get(option))
        if seconds is not None:
            hold = 0 if option == "debounce" else max(int(seconds * 1000), 1)
            record = space.flow(option, queue, str(payload["flow_key"]))
            return record, hold, code, space.flow(counted, queue), name
    return None


# Points where a debounced run stops being pending: a worker took it, an operator deleted or killed it.
ENDED = frozenset({"taken", "deleted", "killed"})

# args: the debounce record's key, the run's jid. The record goes only while it holds this run: a
# later push may already hold it for the next run.
FLOW_FEATURE = """
FEATURES['flow'] = function(point, now, a)
  local held = redis.call('get', a[1])
  if not held then return end
  local ok, job = pcall(cjson.decode, held)
  if ok and type(job) == 'table' and job['jid'] == a[2] then redis.call('del', a[1]) end
end
"""


class FlowFeature:
    """Ends a debounce record with its run (see the module docstring)."""

    name = "flow"
    marks: frozenset[str] | None = frozenset({"flow_key"})  # ops only for debounced or throttled payloads
    observes, wraps = False, False
    lua = FLOW_FEATURE

    def __init__(self, space: keys.Keyspace = keys.DEFAULT) -> None:
        self.space = space  # in Cluster mode a record lives in its queue's slot

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        key, jid = payload.get("flow_key"), payload.get("jid")
        if point not in ENDED or seconds_option(payload.get("debounce")) is None:
            return None
        if not isinstance(key, str) or not key or not isinstance(jid, str):
            return None
        return [self.space.flow("debounce", str(payload.get("queue")), key), jid]

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""
