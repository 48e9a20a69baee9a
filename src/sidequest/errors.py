"""Every exception sidequest raises, under one root.

    SidequestError
    ├── ConfigError              a setting is missing, malformed or contradictory
    ├── RedisUnavailableError    Redis cannot be reached or refuses us (URL shown masked)
    │   ├── RedisURLError        ... because the URL is wrong: invalid, or not a Redis server (also a ConfigError)
    │   └── NotReplicatedError   a push reached the primary, but fewer replicas than wait_replicas confirmed it
    ├── JobArgumentError         an argument or option is not JSON, or does not fit the job (also TypeError, ValueError)
    ├── JobDefinitionError       a job is defined twice under one name, with bad options, or in __main__ without a name
    ├── UnknownJobError          a payload names a job that is not registered
    ├── PayloadError             bytes from Redis that are not a job payload
    ├── JobTimeoutError          a job ran past its time limit
    ├── JobFailed                a business failure: recorded, not retried (tasks)
    ├── OverLimit                control: a rate limit is full; the job is snoozed, not failed (limiter)
    ├── Cancelled                control: the job was cancelled; it ends as cancelled, not failed
    ├── Retry                    control: the job asks to run again in `in_` seconds (retry set, no back-off)
    ├── StepError                a durable step misused: outside a job, a name twice in a run, a result too large
    ├── WaitTimeout              a durable wait (`wait_for`) saw no event within its timeout (also TimeoutError)
    ├── EventError               send_event found no job of that jid (also LookupError)
    └── NoResultError            result(jid) has nothing to give: unknown, no result_ttl, not JSON (also LookupError)

    Suspended (a BaseException)  control: a durable sleep or wait ends the run here; the job resumes later.
                                 Not an Exception, so a job's `except Exception:` cannot swallow it.
"""

from __future__ import annotations

import math
from datetime import timedelta


class SidequestError(Exception):
    """Root of every sidequest exception."""


class ConfigError(SidequestError, ValueError):
    """A configuration value is missing, malformed or contradictory."""


class RedisUnavailableError(SidequestError):
    """Redis cannot be reached, or refused authentication. The message names the masked URL."""


class RedisURLError(RedisUnavailableError, ConfigError):
    """The Redis URL is invalid, or what it points at does not speak Redis: a setting to fix."""


class NotReplicatedError(RedisUnavailableError):
    """A push with `wait_replicas` was written on the primary, but fewer replicas confirmed it
    within `wait_timeout`: a failover now could lose it. Pushing it again is safe for
    idempotent jobs (it may then run twice). `jids` are the jobs of that push."""

    def __init__(self, message: str, jids: list[str], replicas: int) -> None:
        super().__init__(message)
        self.jids = jids
        self.replicas = replicas  # how many replicas did confirm


class JobArgumentError(SidequestError, TypeError, ValueError):
    """An argument or option of a job cannot be stored as native JSON, or the arguments do not
    fit the job's parameters (too many, too few, keywords).

    It is both a TypeError (an object, set, bytes, tuple...) and a ValueError (NaN, a bad
    queue name, an infinite time), so callers may catch whichever reads better.
    """


class JobDefinitionError(SidequestError, ValueError):
    """A job definition is invalid: a duplicate name, an unknown option type, a default name in `__main__`."""


class UnknownJobError(SidequestError, LookupError):
    """A payload names a job class that this process has not registered."""


class PayloadError(SidequestError, ValueError):
    """Bytes read from Redis are not a valid job payload."""


class JobTimeoutError(SidequestError):
    """A job ran longer than its `timeout` option allows."""


class JobFailed(SidequestError):
    """Raised by a job to report a business failure: recorded as failed, never retried."""



class OverLimit(SidequestError):
    """A rate limit is full (`sidequest.limiter`): raised by `with limiter:` when no slot is free.

    Not a failure. Raised in a job, the worker puts the job back in `schedule` `delay` seconds
    ahead (None: a delay that grows with each consecutive snooze), without spending a retry and
    without counting a failure. Raised anywhere else, it is an ordinary exception to handle.
    """

    def __init__(self, name: str, delay: float | None = None) -> None:
        self.name = name
        self.delay = delay  # seconds until a slot is known to free (a window limiter knows), or None
        wait = f"; a slot frees in {delay:.2f} s" if delay is not None else ""
        super().__init__(f"rate limit {name!r} is full{wait}")


class Cancelled(SidequestError):
    """Raised by a job that saw `sidequest.cancelled()` return True: the job ends as cancelled
    (acknowledged, no retry, no dead entry, not counted as failed)."""

    def __init__(self, message: str = "cancelled") -> None:
        super().__init__(message)


class Retry(SidequestError):
    """Raised by a job to run again in `in_` seconds (a number or a timedelta): Celery's
    `self.retry(countdown=...)`, dramatiq's `Retry(delay=...)`.

        @sidequest.job(retry=10)
        def poll(order_id):
            if not ready(order_id):
                raise sidequest.Retry(in_=30)

    The job goes to the `retry` set at exactly now + `in_` (no back-off, no jitter), its
    `retry_count` grows and counts against its `retry` option: past it the job is dead (or
    dropped with `dead=False`), as a failure out of retries is. `exc`, when given, is the cause
    the retry set shows (`error_class`, `error_message`). A retry within the limit is not a
    failure: one INFO line, no traceback, counted processed but not failed, and neither the error
    handlers nor `after_failed` run. Raised outside a job, it is an ordinary exception.
    """

    def __init__(self, in_: float | timedelta = 30, exc: BaseException | None = None) -> None:
        seconds = in_.total_seconds() if isinstance(in_, timedelta) else in_
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise JobArgumentError(f"Retry(in_=...) takes seconds >= 0 or a timedelta, got {in_!r}")
        self.seconds = float(seconds)
        self.exc = exc
        super().__init__(f"retry requested in {self.seconds:g} s" + (f" ({type(exc).__name__}: {exc})" if exc else ""))


class StepError(SidequestError):
    """A durable step (`sidequest.step`) was misused: called outside a job, its name used twice in
    one run of the job, or its result is not native JSON or over the size limit. Raised in the
    job, it fails the job as any exception does (retried; the step was not recorded)."""


class WaitTimeout(SidequestError, TimeoutError):
    """Raised in a job at `sidequest.wait_for(name, timeout=...)` when the timeout passed without
    the event: the job resumed at the timeout. Recorded: every later run of the job raises it
    again at that call (reset the step with `sidequest steps JID --reset NAME` to wait anew)."""


class EventError(SidequestError, LookupError):
    """`sidequest.send_event(jid, ...)` found no job `jid`: none waits, runs, or is queued,
    scheduled, retrying or dead with that jid (it never existed, or it has ended)."""


# The payload key of a job a `Suspended` parked: {"kind": "sleep" or "wait", "step": its record's
# name, "until": epoch seconds, "event": the awaited event's name}. The signal's own protocol, so
# the worker sets and clears it without naming the feature that reads it (steps, status lookups
# show such a job as `waiting`); a failure or a rate-limit snooze removes it.
WAITING = "sidequest_waiting"


class Suspended(BaseException):
    """Control: a durable sleep or wait (`sidequest.sleep`, `sidequest.wait_for`) ends the run of the
    job here; the worker parks the job in `schedule` until `until` (epoch seconds), without
    spending a retry or counting a failure, and the next run resumes past the job's recorded steps.

    A BaseException, as KeyboardInterrupt is, so that a job's own `except Exception:` cannot
    swallow it: let it through (a bare `except:` or `except BaseException:` must raise it again).
    """

    def __init__(self, until: float, step: str, kind: str, event: str | None = None) -> None:
        self.until = until
        self.step = step  # the wait's record in the job's steps
        self.kind = kind  # "sleep" or "wait"
        self.event = event  # the event a "wait" waits for
        what = f"event {event!r}" if event is not None else f"sleep {step!r}"
        super().__init__(f"waiting for {what} until {until:.3f}")


class NoResultError(SidequestError, LookupError):
    """`sidequest.result(jid)` has no result to give and never will: the job is unknown (it never
    existed, or its record expired), it keeps no result (pushed without `result_ttl`), or it is
    done but returned a value that is not native JSON."""
