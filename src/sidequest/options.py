"""Job options (Sidekiq's `sidekiq_options`) and schedule times, checked with clear errors.

Known options and their types:

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

Any other option is kept in the payload as it is, if it is native JSON.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from .config import check_queue_name
from .errors import ConfigError, JobArgumentError
from .payload import RESERVED_KEYS, check_json_value

DEFAULTS: dict[str, Any] = {"retry": True, "queue": "default"}
UNIQUE_UNTIL = ("success", "start")  # when a unique job's claim ends (besides expiring), see `unique`

# The point where Sidekiq stops reading a number as an interval and reads it as an epoch time.
EPOCH_THRESHOLD = 1_000_000_000


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_queue(value: Any, option: str) -> str:
    try:
        return check_queue_name(value, f"option {option!r}")
    except ConfigError as exc:
        raise JobArgumentError(str(exc)) from None


def check_option(key: str, value: Any) -> Any:
    """Return the value to store for option `key`, or raise JobArgumentError saying why not."""
    if not isinstance(key, str) or not key:
        raise JobArgumentError(f"option names are non-empty strings, got {key!r}")
    if key in RESERVED_KEYS:
        raise JobArgumentError(f"{key!r} is set by sidequest itself and cannot be a job option")
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
    check_json_value(value, f"option {key!r}")
    return value


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    return {key: check_option(key, value) for key, value in options.items()}


def seconds_option(value: Any) -> float | None:
    """A duration option as read back from a payload (`unique_for`, `result_ttl`): seconds > 0,
    or None when it is off, or not a usable number (a payload written by other code)."""
    if _is_number(value) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def schedule_at(when: Any, now: float, *, method: str) -> float | None:
    """Epoch seconds to schedule at, or None to enqueue now (the time is not in the future).

    `method` is "perform_in" (seconds or timedelta) or "perform_at" (epoch or aware datetime).
    Both follow Sidekiq's rule: a number below 1e9 is an interval from now.
    """
    if isinstance(when, datetime):
        if method == "perform_in":
            raise JobArgumentError("perform_in takes seconds or a timedelta; use perform_at for a datetime")
        if when.tzinfo is None or when.utcoffset() is None:
            raise JobArgumentError(
                f"perform_at got a naive datetime {when.isoformat()}; give it a timezone "
                "(e.g. datetime.now(timezone.utc)) so the time is not ambiguous"
            )
        ts = when.timestamp()
    elif isinstance(when, timedelta):
        if method == "perform_at":
            raise JobArgumentError("perform_at takes an epoch time or a datetime; use perform_in for a timedelta")
        ts = now + when.total_seconds()  # a delay not in the future enqueues at once, as Sidekiq
    elif _is_number(when):
        if not math.isfinite(when):
            raise JobArgumentError(f"{method} got {when!r}; a time must be a finite number")
        ts = now + when if when < EPOCH_THRESHOLD else float(when)  # negative: now
    else:
        raise JobArgumentError(
            f"{method} takes a number of seconds, a timedelta or a datetime, got {type(when).__name__}"
        )
    return ts if ts > now else None
