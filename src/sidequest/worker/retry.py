"""What a job that raised becomes: retry with backoff, or the dead set, as Sidekiq decides it.

`Retrier.decide` is plain Python (tests call it without Redis) and returns an `Outcome`:
the payload gains `error_message` (capped), `error_class`, `retry_count` (0 on the first
failure), `failed_at` then `retried_at`, and `error_backtrace` when the `backtrace` option
asks (JSON, zlib, base64, as Sidekiq writes it). While attempts remain it is a retry at
`now + delay`, where delay is the job's `retry_in(count, exc)` (used as given, without
Sidekiq's jitter: its author chose it) or Sidekiq's `count**4 + 15 + rand(10) * (count + 1)`.
Then it is dead (trimmed to `dead_max_jobs` and `dead_timeout` when written), or dropped when
`dead=False`. `retry=False` drops the job; `retry=0` goes straight to dead; a `JobFailed` (a
business failure) is dropped, never retried. A payload that cannot be encoded again is dead
as it was fetched (see `outcome.invalid`), so a bad payload can never loop.

The job's own say, all decided here for both runners:
- `sidequest.Retry(in_=...)` raised by the job: a retry at exactly now + `in_`, counted in
  `retry_count` against the same limit (then dead, or dropped with `dead=False`, exhausted);
  `error_class` is its cause's (`exc`) when it names one. Within the limit it is not a failure
  (`Outcome.requested`): `after_failed` and the error handlers do not run for it.
- `discard_on` (worker-side option): a matching exception drops the job; it wins over
  `retry_on`. `retry_on`: any exception it does not name is dead at once (exhausted).
  Neither applies to a `Retry`.
- `retry_in` returning "kill" (dead now, exhausted: `retries_exhausted` and death handlers run)
  or "discard" (dropped, no hooks), as Sidekiq's `sidekiq_retry_in` returns :kill / :discard.

`Retrier.after` runs the hooks (`retries_exhausted`, death handlers) once the outcome has been
written; the processor calls it only when the write committed.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import time
import traceback
import zlib
from collections.abc import Callable
from typing import Any

from sidequest.config import Config
from sidequest.errors import WAITING, JobFailed, Retry, Suspended
from sidequest.jobs.definition import Job
from sidequest.jobs.payload import NO_KWARGS, call_arguments, display_name, encode, in_millis, stamp
from sidequest.worker.outcome import Kind, Outcome, error_class_name, invalid

log = logging.getLogger(__name__)

MAX_MESSAGE = 10_000
MAX_SNOOZE = 300.0  # seconds: the longest a snoozed job waits when its limiter gives no time
KILL, DISCARD = "kill", "discard"  # what `retry_in` may return besides seconds (Sidekiq's :kill / :discard)
DeathHandler = Callable[[dict[str, Any], BaseException], None]
# Called on every failure: the exception and {"job": payload, "queue", "jid", "class", "retry_count"}.
ErrorHandler = Callable[[BaseException, dict[str, Any]], None]


def compress_backtrace(lines: list[str]) -> str:
    return base64.encodebytes(zlib.compress(json.dumps(lines).encode("utf-8"))).decode("ascii")


def decompress_backtrace(blob: str) -> list[str]:
    return json.loads(zlib.decompress(base64.b64decode(blob)).decode("utf-8"))  # type: ignore[no-any-return]


def backtrace_lines(exc: BaseException) -> list[str]:
    """Frames innermost first, in Ruby's `file:line:in 'method'` shape, as Sidekiq's UI shows them."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [f"{f.filename}:{f.lineno}:in `{f.name}'" for f in reversed(frames)]


def retry_limit(payload: dict[str, Any], max_retries: int) -> int:
    """How many retries a job gets: `retry: true` (or none given) `max_retries` (Sidekiq's 25 by
    default), a number that many, `false` none. The retry page shows it beside the count."""
    value = payload.get("retry", True)
    if value is True:
        return max_retries
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, 0)
    return 0


class Retrier:
    """Decides retry vs dead for one failed job; runs the hooks after the outcome is written."""

    def __init__(self, config: Config, death_handlers: list[DeathHandler] | None = None,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None,
                 error_handlers: list[ErrorHandler] | None = None) -> None:
        self.config = config
        self.death_handlers = death_handlers if death_handlers is not None else []
        self.error_handlers = error_handlers if error_handlers is not None else []
        self.clock = clock
        self.rng = rng or random.Random()

    def max_attempts(self, payload: dict[str, Any]) -> int:
        return retry_limit(payload, self.config.max_retries)

    def delay(self, job: Any, count: int, exc: BaseException) -> float | str:
        """The job's own `retry_in` exactly as given (its author chose it): seconds, or KILL or
        DISCARD (Sidekiq's :kill / :discard); else Sidekiq's backoff."""
        if job is not None:
            try:
                custom = job.retry_in(count, exc)
                if isinstance(custom, str) and custom in (KILL, DISCARD):
                    return custom
                if custom is not None and float(custom) > 0:
                    return float(custom)
            except Exception:
                log.exception("retry_in of %s failed or returned a non-number; using the default backoff",
                              getattr(job, "name", type(job).__name__))
        return float(count**4 + 15 + self.rng.randrange(10) * (count + 1))

    @staticmethod
    def verdict(job: Any, exc: BaseException) -> str | None:
        """What the job's worker-side options say of `exc` before any retry: DISCARD (it is in
        `discard_on`, which wins), KILL (`retry_on` is set and does not name it), None (the usual
        path). A `Retry` the job raised is its own request: neither option applies to it."""
        options = getattr(job, "options", None)
        if not options or isinstance(exc, Retry):
            return None
        discard, only = options.get("discard_on"), options.get("retry_on")
        if discard and isinstance(exc, discard):
            return DISCARD
        if only and not isinstance(exc, only):
            return KILL
        return None

    def decide(self, job: Any, payload: dict[str, Any], raw: bytes, queue: str, exc: BaseException) -> Outcome:
        """The outcome of a failed run of `payload` (as fetched: not what middleware changed),
        or of a run that raised `Retry`: a retry at now + its `in_`, within the same limit."""
        if isinstance(exc, JobFailed):
            return Outcome("dropped", payload=payload, error=exc, reason="business failure")
        verdict = self.verdict(job, exc)
        if verdict == DISCARD:
            return Outcome("dropped", payload=payload, error=exc, reason=f"{error_class_name(exc)} is in discard_on")
        if payload.get("retry", True) is False:
            return Outcome("dropped", payload=payload, error=exc, reason="retry=False")
        now = self.clock()
        count = self._record(payload, queue, exc, now)
        reason = f"{payload['error_class']} is not in retry_on" if verdict == KILL else ""
        if verdict is None and count < self.max_attempts(payload):
            wait = exc.seconds if isinstance(exc, Retry) else self.delay(job, count, exc)
            if wait == DISCARD:
                return Outcome("dropped", payload=payload, error=exc, reason="retry_in returned 'discard'")
            if not isinstance(wait, str):
                return self._filed("retry", now + wait, payload, raw, queue, exc)
            reason = "retry_in returned 'kill'"
        if payload.get("dead") is False:
            return Outcome("dropped", payload=payload, error=exc, exhausted=True, reason="dead=False")
        return self._filed("dead", now, payload, raw, queue, exc, reason)

    def _record(self, payload: dict[str, Any], queue: str, exc: BaseException, now: float) -> int:
        """Write the failure into the payload as Sidekiq does; return its `retry_count`. A `Retry`
        records its cause (`exc`) when it names one."""
        # failure times in the payload's own unit (Sidekiq 8's milliseconds stay milliseconds),
        # else the configured one; the retry and dead scores stay float seconds
        failed = stamp(now, self.config.sidekiq_version >= 8 or in_millis(payload))
        cause = exc.exc if isinstance(exc, Retry) and exc.exc is not None else exc
        payload["queue"] = payload.get("retry_queue") or queue
        payload["error_message"] = str(cause)[:MAX_MESSAGE]
        payload["error_class"] = error_class_name(cause)
        payload.pop("recovery_count", None)  # it ran to an end: it does not kill its process
        payload.pop("snoozed", None)  # it got past its rate limits: a later snooze starts short again
        payload.pop(WAITING, None)  # it waits in `retry` now, not for an event
        if isinstance(payload.get("retry_count"), int) and not isinstance(payload["retry_count"], bool):
            payload["retried_at"] = failed
            payload["retry_count"] += 1
        else:
            payload["failed_at"] = failed
            payload["retry_count"] = 0
        wanted = payload.get("backtrace")
        if wanted:
            lines = backtrace_lines(exc)
            if wanted is not True:
                lines = lines[: int(wanted)]
            payload["error_backtrace"] = compress_backtrace(lines)
        return int(payload["retry_count"])

    def _filed(self, kind: Kind, at: float, payload: dict[str, Any], raw: bytes, queue: str, exc: BaseException,
               reason: str = "") -> Outcome:
        """A retry or dead outcome with the payload encoded again (dead as it was fetched when it
        cannot be: see `outcome.invalid`)."""
        try:
            blob = encode(payload)
        except (ValueError, TypeError, RecursionError) as encode_error:
            dead = invalid(raw, queue, error_class_name(encode_error),
                           f"the job failed ({payload['error_class']}: {payload['error_message'][:200]}) "
                           f"and its payload cannot be written back as JSON: {encode_error}", self.clock())
            return Outcome("dead", dead.blob, dead.at, dead.payload, exc, exhausted=True, reason=dead.reason)
        return Outcome(kind, blob, at, payload, exc, exhausted=kind == "dead", reason=reason, origin=queue)

    def snooze(self, payload: dict[str, Any], raw: bytes, queue: str, delay: float | None) -> Outcome:
        """The outcome of a job that met a full rate limit (`OverLimit`): back to `schedule`,
        `retry_count` untouched. `delay` is the limiter's own wait when it knows one (all kinds
        but concurrent); else it grows with each consecutive snooze, counted in the payload's
        `snoozed`: 1, 2, 4, 8 ... seconds (plus up to 1 s of jitter), at most `MAX_SNOOZE`."""
        now = self.clock()
        count = payload.get("snoozed")
        count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
        if delay is None or delay < 0:
            delay = min(2.0 ** min(count, 16) + self.rng.random(), MAX_SNOOZE)
        payload["snoozed"] = count + 1
        payload.pop("recovery_count", None)  # it ran to a controlled end: it does not kill its process
        payload.pop(WAITING, None)
        try:
            blob = encode(payload)
        except (ValueError, TypeError, RecursionError) as encode_error:
            return invalid(raw, queue, error_class_name(encode_error),
                           f"the job was snoozed and its payload cannot be written back as JSON: {encode_error}", now)
        return Outcome("snoozed", blob, now + delay, payload, reason=f"snoozed {count + 1} time(s)")

    def suspend(self, payload: dict[str, Any], raw: bytes, queue: str, signal: Suspended) -> Outcome:
        """The outcome of a durable sleep or wait (`Suspended`): parked in `schedule` until its
        time, marked `WAITING`, with `retry_count`, `snoozed` and `recovery_count` as they were: a
        wait spends no retry, and a job that kills its worker stays bounded by `max_recoveries`
        across its waits (its count is not reset by a controlled end, as a snooze's is)."""
        mark = {"kind": signal.kind, "step": signal.step, "until": signal.until}
        if signal.event is not None:
            mark["event"] = signal.event
        payload[WAITING] = mark
        try:
            blob = encode(payload)
        except (ValueError, TypeError, RecursionError) as encode_error:
            return invalid(raw, queue, error_class_name(encode_error),
                           f"the job was parked and its payload cannot be written back as JSON: {encode_error}",
                           self.clock())
        return Outcome("snoozed", blob, signal.until, payload, reason="waiting")

    def fate(self, outcome: Outcome) -> str:
        """A failed job's outcome in a few words, for its log line."""
        payload = outcome.payload or {}
        if outcome.kind == "retry" and outcome.at is not None:
            return (f"retry {payload.get('retry_count', 0) + 1} of {self.max_attempts(payload)} "
                    f"in {outcome.at - self.clock():.0f} s")
        if outcome.kind == "dead":
            return "moved to the dead set"
        return f"{outcome.kind} ({outcome.reason})" if outcome.reason else outcome.kind

    def after(self, outcome: Outcome, job: Any, ran: dict[str, Any] | None, queue: str) -> None:
        """Hooks for an outcome that has been written (their errors are logged, never raised):
        the job's `after_succeeded`/`after_failed` with the arguments of payload `ran`, the error
        handlers on every failure, and on exhaustion the job's `retries_exhausted` and every
        death handler."""
        payload, exc = outcome.payload or {}, outcome.error
        if outcome.kind == "done":
            call_hook("after_succeeded", job, ran)
            return
        if exc is not None and not outcome.requested:  # a retry the job asked for is not a failure
            call_hook("after_failed", job, ran, exc)
            context = {"job": payload, "queue": queue, "jid": payload.get("jid"), "class": payload.get("class"),
                       "retry_count": payload.get("retry_count")}
            for error_handler in self.error_handlers:
                try:
                    error_handler(exc, context)
                except Exception:
                    log.exception("error handler %r raised", error_handler)
        name, jid = display_name(payload), payload.get("jid")  # an ActiveJob's class, not its wrapper's
        if outcome.logged:
            pass
        elif outcome.kind == "retry" and outcome.at is not None:
            log.info("%s %s failed (%s); %s", name, jid, payload.get("error_class"), self.fate(outcome))
        elif outcome.kind == "dropped" and exc is not None:
            log.warning("%s %s failed and was dropped (%s): %s: %s", name, jid, outcome.reason,
                        error_class_name(exc), exc)
        elif outcome.kind == "dead":
            log.warning("%s %s moved to the dead set: %s", name, jid, outcome.reason or payload.get("error_class"))
        if not outcome.exhausted or exc is None:
            return
        if job is not None:
            try:
                job.retries_exhausted(payload, exc)
            except Exception:
                log.exception("retries_exhausted of %s raised", name)
        for handler in self.death_handlers:
            try:
                handler(payload, exc)
            except Exception:
                log.exception("death handler %r raised", handler)


# the base class's no-op hooks: a job that keeps them has nothing to call
_UNSET_HOOKS = {name: getattr(Job, name) for name in ("after_succeeded", "after_failed")}


def call_hook(hook: str, job: Any, payload: dict[str, Any] | None, *first: Any) -> None:
    """Run one of a job's own hooks with `first` and the job's arguments (see `call_arguments`);
    an exception in it is logged, never a job failure. A worker's and `sidequest.testing`'s."""
    if job is None or getattr(type(job), hook, None) is _UNSET_HOOKS.get(hook):  # most jobs: no hook of their own
        return
    try:
        args, kwargs = call_arguments(payload) if payload is not None else ([], NO_KWARGS)
        getattr(job, hook)(*first, *args, **kwargs)
    except Exception:
        log.exception("%s of %s raised", hook, getattr(job, "name", type(job).__name__))
