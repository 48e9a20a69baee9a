"""Job options (Sidekiq's `sidekiq_options`) and schedule times, checked with clear errors.

Known options and their types (`JobOptions` spells them for a type checker):

    queue        str, a valid queue name                       default "default"
    retry        True (= 25 attempts), False, or an int >= 0   default True
    retry_queue  str, a valid queue name
    backtrace    bool, or an int (how many lines to keep)
    dead         bool: whether exhausted jobs go to the dead set
    tags         list of str
    timeout      number of seconds > 0 (sidequest's per-job time limit)
    unique_for   number of seconds > 0: while a copy with the same class, args and queue is
                 pending or running (at most this long), another push of it writes nothing
    unique_until "success" (default: the claim ends when the job succeeds or dies) or
                 "start" (it ends when the job starts)
    result_ttl   number of seconds > 0: keep the job's state and return value this long after
                 each change (`sidequest.status`, `sidequest.result`)
    expires_in   seconds > 0 or a timedelta: a job not started this long after its time is
                 dropped unstarted (Sidekiq Pro's option; the push stores the deadline,
                 `expires_at`, in epoch seconds)
    debounce     seconds > 0 or a timedelta: a push (re)schedules ONE run this long after it,
                 with its arguments; a pending run of the same key is replaced (`flow`)
    throttle     seconds > 0 or a timedelta: at most one run per period per key, the first
                 call's; the other pushes write nothing and return None (`flow`)
    key          with debounce or throttle: a function of the job's arguments (called as the
                 job is) whose JSON value says which pushes are "the same" (default: the class,
                 args, kwargs and queue); not stored in the payload
    group        a str or int, or a function of the job's arguments (called as the job is) giving
                 one: the queue serves its groups in turn (fairness between tenants, `lanes`)
    priority     an int 0..9: higher runs first within the queue, FIFO within a level (`lanes`)
    group_concurrency  an int >= 1: at most this many jobs of one group staged or running at once
    group_rate   (count, seconds): at most `count` jobs of one group started per `seconds`
    group_weight an int from 1 to 1,000 (default 1): the group's share of its level's turns (a
                 group of weight 4 stages 4 jobs to a group of weight 1's one, `lanes`)
    wait_replicas  int >= 0: the push returns once this many replicas hold it (Redis WAIT),
                 or raises NotReplicatedError after wait_timeout (default: the client's
                 configuration, 0); not stored in the payload
    wait_timeout   seconds > 0 the push waits for wait_replicas (default: the configuration's, 1 s)
    custom       a dict of fields of your own (native JSON), written as top-level payload
                 fields, as Sidekiq writes any option it does not know

Worker-side options (`DefinitionOptions`): given where the job is defined (`@job(...)`, a `Job`
subclass's keywords) and read there by the worker, never written to the payload (exception
classes are not JSON), so `.set(...)` and a push refuse them:

    retry_on     an exception class or a tuple of them: only these are retried; any other
                 exception sends the job to the dead set at once (Celery's `autoretry_for`)
    discard_on   an exception class or a tuple of them: a failure with one of these drops the
                 job (logged; no retry, no dead entry, no `retries_exhausted`). It wins over
                 `retry_on`. Neither applies to a `sidequest.Retry` the job raises itself.

Any other name is refused where it is written (`@job(...)`, a `Job` subclass's keywords,
`.set(...)`, a push), with the nearest known name: a misspelt `retries=3` would otherwise
travel as a payload field while the real `retry` kept its default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from sidequest.config import check_queue_name
from sidequest.errors import ConfigError, JobArgumentError
from sidequest.jobs.payload import RESERVED_KEYS, check_json_value

DEFAULTS: dict[str, Any] = {"retry": True, "queue": "default"}
PUSH_ONLY = ("wait_replicas", "wait_timeout", "key")  # options of how a push is written, not payload fields
WORKER_SIDE = ("retry_on", "discard_on")  # options of the definition, read by the worker: not payload fields
UNIQUE_UNTIL = ("success", "start")  # when a unique job's claim ends (besides expiring), see `unique`

# Payload fields that steer a feature, with the feature that sets them on its own jobs: no push
# option may set them, or any producer could claim to be another workflow's step or task's job
# (a worker also checks the claim: see `workflows.lua` and `tasks.lua`). The feature lays them
# over the checked options itself (`Client.build(..., steer=...)`).
FEATURE_FIELDS = {"workflow_id": "workflows", "workflow_step": "workflows", "task_id": "tasks"}

# The point where Sidekiq stops reading a number as an interval and reads it as an epoch time.
EPOCH_THRESHOLD = 1_000_000_000
MAX_LANE_COUNT = 1_000_000_000  # group_concurrency, group_rate's count: more is no limit (Lua's numbers stay exact)
MAX_RATE_SECONDS = 366 * 86_400  # group_rate's window: a year at most (its milliseconds expire a Redis key)
MAX_GROUP_WEIGHT = 1_000  # a group's turns in a row within one pass of its level's rotation, at most
LANE_OPTIONS = ("group", "priority", "group_concurrency", "group_rate", "group_weight")


class JobOptions(TypedDict, total=False):
    """The options of a job (`@sidequest.job(...)`, `class X(sidequest.Job, ...)`, `.set(...)`)."""

    queue: str  # the queue it is pushed to ("default")
    retry: bool | int  # True: up to max_retries (25); an int: that many; 0: dead at once; False: dropped
    retry_queue: str  # retries go to this queue instead
    backtrace: bool | int  # keep the failure's traceback in the payload (an int: that many frames)
    dead: bool  # False: a job out of retries is dropped instead of kept in `dead`
    tags: list[str] | tuple[str, ...]  # shown by Sidekiq's Web UI
    timeout: float | None  # seconds `perform` may run
    unique_for: float | None  # seconds: one pending copy per class, args and queue (`unique`)
    unique_until: Literal["success", "start"]  # when a unique job's claim ends
    result_ttl: float | None  # seconds to keep the job's state and return value (`results`)
    expires_in: float | timedelta | None  # not started this long after its time: dropped unstarted
    debounce: float | timedelta | None  # run once, this long after the last push of a burst (`flow`)
    throttle: float | timedelta | None  # at most one run per this long per key, the first push's (`flow`)
    key: Callable[..., Any] | None  # what counts as "the same" push for debounce or throttle
    group: str | int | Callable[..., str | int] | None  # the job's group: groups take turns (`lanes`)
    priority: int | None  # 0..9, higher first within the queue (`lanes`)
    group_concurrency: int | None  # at most this many of one group staged or running at once
    group_rate: tuple[int, float] | None  # (count, seconds): at most count of one group per seconds
    group_weight: int | None  # the group's share of the turns (1: the default; 4: four turns to 1's one)
    wait_replicas: int  # the push waits until this many replicas hold it (see `Config.wait_replicas`)
    wait_timeout: float  # ... at most this many seconds, then raises NotReplicatedError
    custom: Mapping[str, Any]  # payload fields of your own, native JSON


ExceptionClasses = type[BaseException] | tuple[type[BaseException], ...]


class DefinitionOptions(JobOptions, total=False):
    """The options of a job's definition (`@sidequest.job(...)`, a `Job` subclass's keywords):
    every `JobOptions` plus the worker-side ones, which no push carries (see `WORKER_SIDE`)."""

    retry_on: ExceptionClasses | None  # only these are retried; any other failure: dead at once
    discard_on: ExceptionClasses | None  # a failure with one of these drops the job (wins over retry_on)


KNOWN = tuple(DefinitionOptions.__annotations__)
# Spellings other job libraries use for what sidequest calls otherwise (Celery, RQ, Dramatiq,
# Huey, arq): what a newcomer types first.
ELSEWHERE = {"retries": "retry", "max_retries": "retry", "queue_name": "queue", "time_limit": "timeout",
             "soft_time_limit": "timeout", "job_timeout": "timeout", "ttl": "expires_in",
             "expires": "expires_in", "expire_in": "expires_in", "expiry": "expires_in",
             "expiration": "expires_in", "unique": "unique_for", "unique_in": "unique_for",
             "result_ttl_seconds": "result_ttl", "dead_letter": "dead", "autoretry_for": "retry_on"}
# Words that are not options at all in sidequest, with where the thing lives instead (Celery's
# task options among them: docs/coming-from-celery.md).
_RETRY_IN = "give the job retry_in=lambda count, exc: seconds (a Job class: a retry_in method)"
NOT_OPTIONS = {"countdown": "to run it later, push it with perform_in(seconds, ...)",
               "eta": "to run it at a time, push it with perform_at(when, ...)",
               "delay": "to run it later, push it with perform_in(seconds, ...)",
               "bind": "a job asks sidequest.current_job() for its jid, retry count and queue (Celery's self.request)",
               "default_retry_delay": _RETRY_IN, "retry_backoff": _RETRY_IN, "retry_jitter": _RETRY_IN,
               "rate_limit": "make a limiter, sidequest.limiter.window(name, 10, per=60), and take it with `with` "
                             "inside the job",
               "ignore_result": "no result is kept unless the job (or Config) has result_ttl",
               "acks_late": "reliable fetch, the default, keeps a running job in Redis until it ends"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_queue(value: Any, option: str) -> str:
    try:
        return check_queue_name(value, f"option {option!r}")
    except ConfigError as exc:
        raise JobArgumentError(str(exc)) from None


def unknown_option(key: str) -> str:
    """The one-line error for an option name sidequest does not know, with the nearest one."""
    if key in NOT_OPTIONS:
        return f"{key!r} is not a job option: {NOT_OPTIONS[key]}"
    import difflib  # only for a mistake

    near = ELSEWHERE.get(key) or next(iter(difflib.get_close_matches(key, KNOWN, n=1, cutoff=0.6)), None)
    known = f"did you mean {near!r}?" if near else f"the options are {', '.join(k for k in KNOWN if k != 'custom')}"
    return f"unknown job option {key!r}; {known} (a payload field of your own goes in custom={{{key!r}: ...}})"


def _check_custom(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise JobArgumentError(f"option 'custom' must be a dict of your own payload fields, got {value!r}")
    fields: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise JobArgumentError(f"custom field names are non-empty strings, got {name!r}")
        if name in KNOWN:
            raise JobArgumentError(f"{name!r} is a job option, not a custom field: give it as {name}=...")
        if name in RESERVED_KEYS:
            raise JobArgumentError(f"{name!r} is set by sidequest itself and cannot be a custom field")
        if name in FEATURE_FIELDS:
            raise JobArgumentError(f"{name!r} is set by sidequest's {FEATURE_FIELDS[name]} on their own jobs and "
                                   f"cannot be a custom field (add the job through the {name.split('_')[0]} instead)")
        check_json_value(item, f"custom field {name!r}")
        fields[name] = item
    return fields


def _check_exceptions(key: str, value: Any, definition: bool) -> tuple[type[BaseException], ...] | None:
    """A worker-side option: exception classes, given where the job is defined."""
    if not definition:
        raise JobArgumentError(f"option {key!r} is read by the worker where the job is defined and is not carried "
                               f"in a payload (exception classes are not JSON): give it in @job({key}=...) or the "
                               f"Job class's keywords, not in .set() or a push")
    if value is None:
        return None  # a subclass turns its parent's off
    classes = value if isinstance(value, (tuple, list)) else (value,)
    if not classes or not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        raise JobArgumentError(f"option {key!r} must be an exception class or a tuple of them, got {value!r}")
    return tuple(classes)


def _check_lane(key: str, value: Any) -> Any:
    """The options of a job's lane (`lanes`); None turns one off for a push."""
    if value is None:
        return None
    if key == "group":
        if callable(value) or (isinstance(value, (str, int)) and not isinstance(value, bool) and value != ""):
            return value
        raise JobArgumentError(f"option 'group' must be a str or int, or a function of the job's arguments giving one "
                               f"(group=lambda tenant_id, **_: tenant_id), got {value!r}")
    if key == "priority":
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 9:
            return value
        raise JobArgumentError(f"option 'priority' must be an int from 0 to 9 (9 runs first, 5 is the middle), "
                               f"got {value!r}")
    if key == "group_concurrency":
        if group_concurrency_of(value) is not None:
            return value
        raise JobArgumentError(f"option 'group_concurrency' must be an int from 1 to {MAX_LANE_COUNT:,}, got {value!r}")
    if key == "group_weight":
        if group_weight_of(value) is not None:
            return value
        raise JobArgumentError(f"option 'group_weight' must be an int from 1 to {MAX_GROUP_WEIGHT:,} (its share of the "
                               f"turns: 2 gets twice a weight of 1's), got {value!r}")
    rate = group_rate_of(value)
    if rate is not None:
        return list(rate)
    raise JobArgumentError(f"option 'group_rate' must be (count, seconds), count from 1 to {MAX_LANE_COUNT:,} and "
                           f"seconds above 0 up to {MAX_RATE_SECONDS:,} (a year), e.g. group_rate=(10, 60) for at most "
                           f"10 a minute per group, got {value!r}")


def group_concurrency_of(value: Any) -> int | None:
    """A `group_concurrency` value if valid, else None: the one rule for a definition, a push
    and a payload that came from elsewhere (`lanes.limits_of`)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LANE_COUNT:
        return value
    return None


def group_weight_of(value: Any) -> int | None:
    """A `group_weight` value if valid, else None (see `group_concurrency_of`)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_GROUP_WEIGHT:
        return value
    return None


def group_rate_of(value: Any) -> tuple[int, float] | None:
    """A `group_rate` value as (count, seconds) if valid, else None (see `group_concurrency_of`).
    The window is bounded so that its milliseconds are an expire time Redis takes (`PEXPIRE`)."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        return None
    count, seconds = value
    if (isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_LANE_COUNT
            and _is_number(seconds) and math.isfinite(seconds) and 0 < seconds <= MAX_RATE_SECONDS):
        return count, seconds
    return None


def lane_group(base: dict[str, Any]) -> Callable[..., Any] | None:
    """(At push, on the checked payload fields.) Drop the lane options turned off (None) and
    refuse limits without a group; return the group function to call per job, if one."""
    for key in LANE_OPTIONS:
        if key in base and base[key] is None:
            del base[key]
    if "group" not in base and ("group_concurrency" in base or "group_rate" in base or "group_weight" in base):
        raise JobArgumentError("group_concurrency, group_rate and group_weight apply to each group: "
                               "give the job a group too "
                               "(group=lambda tenant_id, **_: tenant_id)")
    group = base.get("group")
    if callable(group):
        del base["group"]
        function: Callable[..., Any] = group
        return function
    if group is not None:
        base["group"] = str(group)
    return None


def group_value(function: Callable[..., Any], args: list[Any], kwargs: Mapping[str, Any] | None, name: str) -> str:
    """The group of one push: `function` called with the job's arguments, a str or int."""
    value = function(*args, **(kwargs or {}))
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise JobArgumentError(f"the group function of job {name!r} returned {value!r}; return a non-empty str or "
                               "an int (e.g. the tenant's id)")
    return str(value)


def check_option(key: str, value: Any, *, definition: bool = False) -> Any:
    """Return the value to store for option `key`, or raise JobArgumentError saying why not.
    `definition`: the options of a job's definition, where the worker-side ones may be given."""
    if not isinstance(key, str) or not key:
        raise JobArgumentError(f"option names are non-empty strings, got {key!r}")
    if key in RESERVED_KEYS:
        raise JobArgumentError(f"{key!r} is set by sidequest itself and cannot be a job option")
    if key not in KNOWN:
        raise JobArgumentError(unknown_option(key))
    if key in ("queue", "retry_queue"):
        return _check_queue(value, key)
    if key == "retry":
        if isinstance(value, bool) or (isinstance(value, int) and value >= 0):
            return value
        raise JobArgumentError(f"option 'retry' must be True, False or an int >= 0, got {value!r}")
    if key == "backtrace":
        if isinstance(value, bool) or (isinstance(value, int) and value >= 0):
            return value
        raise JobArgumentError(f"option 'backtrace' must be a bool or a line count >= 0, got {value!r}")
    if key == "dead":
        if isinstance(value, bool):
            return value
        raise JobArgumentError(f"option 'dead' must be True or False, got {value!r}")
    if key == "tags":
        if isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
            return list(value)
        raise JobArgumentError(f"option 'tags' must be a list of strings, got {value!r}")
    if key == "timeout":
        if value is None or (_is_number(value) and math.isfinite(value) and value > 0):
            return value
        raise JobArgumentError(f"option 'timeout' must be a number of seconds above 0, got {value!r}")
    if key in ("unique_for", "result_ttl"):
        if value is None or (_is_number(value) and math.isfinite(value) and value > 0):
            return value  # None turns it off for one push: `.set(unique_for=None)`
        raise JobArgumentError(f"option {key!r} must be a number of seconds above 0 (or None), got {value!r}")
    if key == "unique_until":
        if value in UNIQUE_UNTIL:
            return value
        raise JobArgumentError(f"option 'unique_until' must be {' or '.join(map(repr, UNIQUE_UNTIL))}, got {value!r}")
    if key == "wait_replicas":
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise JobArgumentError(f"option 'wait_replicas' must be a whole number >= 0, got {value!r}")
    if key == "wait_timeout":
        if _is_number(value) and math.isfinite(value) and value > 0:
            return value
        raise JobArgumentError(f"option 'wait_timeout' must be a number of seconds above 0, got {value!r}")
    if key == "expires_in":
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if seconds is None or (_is_number(seconds) and 0 < seconds < EPOCH_THRESHOLD):
            return seconds  # None turns it off for one push
        raise JobArgumentError(f"option 'expires_in' must be a duration (seconds above 0 or a timedelta; "
                               f"not an epoch time), or None, got {value!r}")
    if key in ("debounce", "throttle"):
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        if seconds is None or (_is_number(seconds) and 0 < seconds < EPOCH_THRESHOLD):
            return seconds  # None turns it off for one push
        raise JobArgumentError(f"option {key!r} must be a duration (seconds above 0 or a timedelta), or None, "
                               f"got {value!r}")
    if key == "key":
        if value is None or callable(value):
            return value
        raise JobArgumentError(f"option 'key' must be a function of the job's arguments (e.g. key=lambda account_id, "
                               f"**_: account_id), got {value!r}")
    if key in LANE_OPTIONS:
        return _check_lane(key, value)
    if key in WORKER_SIDE:
        return _check_exceptions(key, value, definition)
    return _check_custom(value)  # the last known option: `custom`


def check_options(options: Mapping[str, Any], *, definition: bool = False) -> dict[str, Any]:
    """The options checked (see `check_option`); `custom` as a plain dict. Checking the result
    again gives it back unchanged."""
    return {key: check_option(key, value, definition=definition) for key, value in options.items()}


def merge_options(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Checked options `base`, then checked `more` over them; `custom` fields merge by name."""
    merged = {**base, **more}
    if "custom" in base and "custom" in more:
        merged["custom"] = {**base["custom"], **more["custom"]}
    return merged


def payload_fields(options: Mapping[str, Any]) -> dict[str, Any]:
    """Checked options as payload fields: the custom ones at the top level, as Sidekiq keeps them
    (the options of how it is pushed, `PUSH_ONLY`, and the worker-side ones are not stored)."""
    fields = {key: value for key, value in options.items()
              if key != "custom" and key not in PUSH_ONLY and key not in WORKER_SIDE}
    fields.update(options.get("custom") or {})
    return fields


def seconds_option(value: Any) -> float | None:
    """A duration option as read back from a payload (`unique_for`, `result_ttl`, `expires_in`):
    seconds > 0, or None when it is off, or not a usable number (a payload written by other code)."""
    if _is_number(value) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def expires_at(payload: Mapping[str, Any], when: float | None, now: float) -> float | None:
    """The deadline of a payload being pushed (epoch seconds), or None when it has no `expires_in`:
    `expires_in` after the job's time (`when`, a scheduled job's) or after now, as Sidekiq Pro."""
    seconds = seconds_option(payload.get("expires_in"))
    return None if seconds is None else (now if when is None else when) + seconds


def schedule_at(when: Any, now: float, *, method: str, said: tuple[str, str] | None = None) -> float | None:
    """Epoch seconds to schedule at, or None to enqueue now (the time is not in the future).

    `method` is "perform_in" (seconds or timedelta) or "perform_at" (epoch or aware datetime).
    Both follow Sidekiq's rule: a number below 1e9 is an interval from now. `said` names, for
    the errors, what the caller wrote and its sibling when that is not `method`: a user who
    called `apply_async(eta=...)` reads "apply_async's eta", not a method they never called.
    """
    this, other = said or (method, "perform_at" if method == "perform_in" else "perform_in")
    if isinstance(when, datetime):
        if method == "perform_in":
            raise JobArgumentError(f"{this} takes seconds or a timedelta; use {other} for a datetime")
        if when.tzinfo is None or when.utcoffset() is None:
            raise JobArgumentError(
                f"{this} got a naive datetime {when.isoformat()}; give it a timezone "
                "(e.g. datetime.now(timezone.utc)) so the time is not ambiguous"
            )
        ts = when.timestamp()
    elif isinstance(when, timedelta):
        if method == "perform_at":
            raise JobArgumentError(f"{this} takes an epoch time or a datetime; use {other} for a timedelta")
        ts = now + when.total_seconds()  # a delay not in the future enqueues at once, as Sidekiq
    elif _is_number(when):
        if not math.isfinite(when):
            raise JobArgumentError(f"{this} got {when!r}; a time must be a finite number")
        ts = now + when if when < EPOCH_THRESHOLD else float(when)  # negative: now
    else:
        raise JobArgumentError(
            f"{this} takes a number of seconds, a timedelta or a datetime, got {type(when).__name__}"
        )
    return ts if ts > now else None


def spread_seconds(spread: Any) -> float:
    """The length in seconds of a bulk push's `spread` (a timedelta or a number of seconds),
    checked: a negative, infinite or non-duration value is refused with one clear error."""
    if isinstance(spread, timedelta):
        seconds = spread.total_seconds()
    elif _is_number(spread):
        seconds = float(spread)
    else:
        raise JobArgumentError(f"spread takes a timedelta or a number of seconds, got {type(spread).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise JobArgumentError(f"spread must be a duration of 0 or more, got {spread!r}")
    return seconds


def spread_times(start: float, count: int, seconds: float, now: float) -> list[float | None]:
    """Times for `count` jobs spread evenly over [start, start + seconds): job i at
    start + i * seconds / count (None, enqueue now, for a time that is not in the future)."""
    step = seconds / count if count else 0.0
    return [t if t > now else None for t in (start + i * step for i in range(count))]
