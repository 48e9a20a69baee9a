"""Celery's `apply_async` as one push, decided once for every caller: a job, a job with options
(`job.set(...)`), a workflow step (`job.s(...)`).

    mail.apply_async((7,), {"template": "reset"}, countdown=60, queue="urgent", priority=9)

Celery's options that sidequest honours: `countdown` (seconds or a timedelta: `perform_in`'s
delay), `eta` (an aware datetime or epoch seconds: `perform_at`'s time), `expires` (seconds or a
timedelta from now, or a datetime: Celery's deadline; the `expires_in` option, counted from the
job's own time), `queue`, `priority` (0 to 9, 9 first, as RabbitMQ orders them; Celery on Redis
runs 0 first) and `time_limit` (the `timeout` option). Each of Celery's others is refused in one
line that says what to use instead (`CELERY_ONLY`); an error names what the user wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Never, TypedDict

from sidequest.errors import JobArgumentError
from sidequest.jobs.options import check_options, schedule_at


class ApplyAsyncOptions(TypedDict, total=False):
    """What `apply_async` takes after `args` and `kwargs`: Celery's names for sidequest's push options.

    Celery's options that sidequest has no use for are typed `Never`, so a type checker flags them
    where they are written; at run time each is refused with what to use instead."""

    countdown: float | timedelta | None  # run this long from now (perform_in)
    eta: float | datetime | None  # run at this time: an aware datetime or epoch seconds (perform_at)
    expires: float | timedelta | datetime | None  # not started by then (from now, or a deadline): dropped
    queue: str | None  # the queue it is pushed to
    priority: int | None  # 0..9, 9 first within the queue
    time_limit: float | None  # seconds the job may run (its timeout)
    soft_time_limit: Never
    task_id: Never
    shadow: Never
    link: Never
    link_error: Never
    retry: Never
    retry_policy: Never
    exchange: Never
    routing_key: Never
    serializer: Never
    compression: Never
    headers: Never
    ignore_result: Never
    add_to_parent: Never
    producer: Never
    publisher: Never
    connection: Never
    router: Never


_CLIENT = "give a client: job.set(client=sidequest.Client(config)).apply_async(...)"
_ROUTE = "there are no exchanges or routing keys: give queue='name' (a worker names its queues with -q)"
_SENT = ("it is how Celery retries sending the message; a push reconnects as redis-py does. The job's own "
         "retries are the retry option: job.set(retry=5).apply_async(...)")
# Celery's apply_async options that sidequest does not take, with where the thing lives here.
CELERY_ONLY = {
    "soft_time_limit": "sidequest has no soft time limit; time_limit= (the job's timeout) is the hard one",
    "task_id": "sidequest makes the jid and returns it; for one pending copy at a time give job.set(unique_for=...)",
    "shadow": "a job's name is its wire name, given where it is defined: @sidequest.job(name=...)",
    "link": "chain the next step: (job.s(...) | next_job.s()).apply_async()",
    "link_error": "in a workflow give the step .on_failure(handler.si(...)); or use the job's retries_exhausted",
    "retry": _SENT, "retry_policy": _SENT,
    "exchange": _ROUTE, "routing_key": _ROUTE, "router": _ROUTE,
    "serializer": "a payload is always JSON (Sidekiq's format)", "compression": "a payload is always plain JSON",
    "headers": "fields of your own go in a payload's custom fields: job.set(custom={...}).apply_async(...)",
    "ignore_result": "no result is kept unless the job (or the Config) has result_ttl",
    "add_to_parent": "sidequest keeps no tree of parent and child results; a workflow links its steps",
    "producer": _CLIENT, "publisher": _CLIENT, "connection": _CLIENT,
}
# Celery's name -> sidequest's job option, for the options passed on as they are
_AS_OPTIONS = {"queue": "queue", "priority": "priority", "time_limit": "timeout"}
TAKEN = ("countdown", "eta", "expires", *_AS_OPTIONS)


class Push(NamedTuple):
    """One push as `Client.push` takes it."""

    args: list[Any]
    kwargs: Mapping[str, Any] | None
    at: float | None  # epoch seconds, or None to enqueue now
    options: dict[str, Any]


def translate(args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None, options: Mapping[str, Any],
              given: Mapping[str, Any], now: float) -> Push:
    """`apply_async(args, kwargs, **given)` on a job with `options`, as a push (no I/O)."""
    _refuse_unknown(given)
    if isinstance(args, (str, bytes)) or not isinstance(args, (Sequence, type(None))):
        raise JobArgumentError(f"apply_async takes args as a list or tuple, got {type(args).__name__}")
    countdown, eta, expires = given.get("countdown"), given.get("eta"), given.get("expires")
    if countdown is not None and eta is not None:
        raise JobArgumentError("apply_async takes countdown or eta, not both")
    at = (schedule_at(eta, now, method="perform_at", said=("apply_async's eta", "countdown")) if eta is not None
          else schedule_at(countdown, now, method="perform_in", said=("apply_async's countdown", "eta"))
          if countdown is not None else None)
    merged = dict(options)
    for theirs, ours in _AS_OPTIONS.items():
        if given.get(theirs) is not None:
            try:
                merged.update(check_options({ours: given[theirs]}))
            except JobArgumentError as exc:
                raise JobArgumentError(f"apply_async({theirs}=...): {exc}") from None
    if expires is not None:
        merged["expires_in"] = _expires_in(expires, at or now, now)
    return Push(list(args or ()), kwargs, at, merged)


def _refuse_unknown(given: Mapping[str, Any]) -> None:
    for name in given:
        if name in TAKEN:
            continue
        if name in CELERY_ONLY:
            raise JobArgumentError(f"apply_async does not take Celery's {name}=: {CELERY_ONLY[name]}")
        import difflib  # only for a mistake

        near = next(iter(difflib.get_close_matches(name, TAKEN, n=1, cutoff=0.6)), None)
        hint = f"did you mean {near!r}?" if near else f"it takes {', '.join(TAKEN)}"
        raise JobArgumentError(f"apply_async got an unknown option {name!r}; {hint}")


def _expires_in(expires: Any, start: float, now: float) -> float:
    """Celery's `expires` (a delay from now, or a deadline) as sidequest's `expires_in`: seconds
    after the job's own time (`start`: its eta or countdown, else now), so the deadline is the same."""
    if isinstance(expires, datetime):
        deadline = schedule_at(expires, now, method="perform_at", said=("apply_async's expires", "a delay")) or now
    elif isinstance(expires, (int, float, timedelta)) and not isinstance(expires, bool):
        deadline = now + (expires.total_seconds() if isinstance(expires, timedelta) else expires)
    else:
        raise JobArgumentError(f"apply_async: expires takes seconds, a timedelta or a datetime, got {expires!r}")
    if deadline <= start:
        raise JobArgumentError(f"apply_async: expires ({expires!r}) is not after the job's own time, so it could "
                               "never run; give a later expires, or none")
    return deadline - start
