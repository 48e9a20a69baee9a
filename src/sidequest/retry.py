"""What happens to a job that raised: retry with backoff, or the dead set, as Sidekiq does it.

On a failure the payload gains `error_message` (capped), `error_class`, `retry_count` (0 on the
first failure), `failed_at` then `retried_at`, and `error_backtrace` when the `backtrace`
option asks (JSON, zlib, base64, as Sidekiq writes it). While attempts remain it goes to the
`retry` set at `now + delay`, where delay is the job's `retry_in(count, exc)` (used as given,
without Sidekiq's jitter: its author chose it) or Sidekiq's
`count**4 + 15 + rand(10) * (count + 1)`. Then the job's `retries_exhausted` hook runs, the
payload goes to `dead` (trimmed to `dead_max_jobs` and `dead_timeout`) unless `dead=False`,
and the death handlers run. `retry=False` drops the job after logging; `retry=0` goes
straight to dead. A job raising `JobFailed` (a business failure) is never retried.
Jobs of a task also get their task event updated in the same MULTI (see `tasks`).
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
from typing import TYPE_CHECKING, Any

from . import keys
from .config import Config
from .errors import JobFailed
from .payload import encode

if TYPE_CHECKING:
    from .tasks import TaskRecorder

log = logging.getLogger(__name__)

MAX_MESSAGE = 10_000


def error_class_name(exc: BaseException) -> str:
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def compress_backtrace(lines: list[str]) -> str:
    return base64.encodebytes(zlib.compress(json.dumps(lines).encode("utf-8"))).decode("ascii")


def decompress_backtrace(blob: str) -> list[str]:
    return json.loads(zlib.decompress(base64.b64decode(blob)).decode("utf-8"))  # type: ignore[no-any-return]


def backtrace_lines(exc: BaseException) -> list[str]:
    """Frames innermost first, in Ruby's `file:line:in 'method'` shape, as Sidekiq's UI shows them."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [f"{f.filename}:{f.lineno}:in `{f.name}'" for f in reversed(frames)]


class Retrier:
    """Decides retry vs dead for one failed job and writes the outcome."""

    def __init__(self, config: Config, death_handlers: list[Callable[[dict[str, Any], BaseException], None]] | None = None,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None,
                 tasks: TaskRecorder | None = None) -> None:
        self.config = config
        self.tasks = tasks
        self.death_handlers = death_handlers if death_handlers is not None else []
        self.clock = clock
        self.rng = rng or random.Random()

    def max_attempts(self, payload: dict[str, Any]) -> int:
        value = payload.get("retry", True)
        if value is True:
            return self.config.max_retries
        if isinstance(value, int) and not isinstance(value, bool):
            return max(value, 0)
        return 0

    def delay(self, job: Any, count: int, exc: BaseException) -> float:
        """The job's own `retry_in` exactly as given (its author chose it), else Sidekiq's backoff."""
        if job is not None:
            try:
                custom = job.retry_in(count, exc)
                if custom is not None and float(custom) > 0:
                    return float(custom)
            except Exception:
                log.exception("retry_in of %s failed or returned a non-number; using the default backoff",
                              payload_name(job))
        return float(count**4 + 15 + self.rng.randrange(10) * (count + 1))

    def failed(self, job: Any, payload: dict[str, Any], queue: str, exc: BaseException) -> Callable[[Any], None] | None:
        """Record the failure in `payload`; return the Redis commands that file it (or None to drop).

        The commands run in the same MULTI as the acknowledgement, so a job is never both
        retried and still reserved, nor lost between the two.
        """
        if isinstance(exc, JobFailed):
            log.info("%s %s failed (business failure, not retried): %s", payload.get("class"), payload.get("jid"), exc)
            return self._task(payload, "failed", f"failed: {exc}", exc)
        if payload.get("retry", True) is False:
            log.warning("%s %s failed and has retry=False: dropped: %s: %s",
                        payload.get("class"), payload.get("jid"), error_class_name(exc), exc)
            return self._task(payload, "error", f"error: {error_class_name(exc)}: {exc}", exc)
        now = self.clock()
        payload["queue"] = payload.get("retry_queue") or queue
        payload["error_message"] = str(exc)[:MAX_MESSAGE]
        payload["error_class"] = error_class_name(exc)
        if isinstance(payload.get("retry_count"), int):
            payload["retried_at"] = now
            payload["retry_count"] += 1
        else:
            payload["failed_at"] = now
            payload["retry_count"] = 0
        count = payload["retry_count"]
        wanted = payload.get("backtrace")
        if wanted:
            lines = backtrace_lines(exc)
            if wanted is not True:
                lines = lines[: int(wanted)]
            payload["error_backtrace"] = compress_backtrace(lines)
        if count < self.max_attempts(payload):
            at = now + self.delay(job, count, exc)
            blob = encode(payload)
            log.info("%s %s failed (%s); retry %d in %.0f s", payload.get("class"), payload.get("jid"),
                     payload["error_class"], count, at - now)
            waiting = self._task(payload, "enqueued", f"error: {payload['error_class']}: {exc}; "
                                 f"waiting for retry {count + 1} in {at - now:.0f} s", exc)

            def retry(pipe: Any) -> None:
                pipe.zadd(keys.RETRY, {blob: at})
                if waiting is not None:
                    waiting(pipe)
            return retry
        return self.exhausted(job, payload, exc)

    def _task(self, payload: dict[str, Any], status: str, message: str,
              exc: BaseException) -> Callable[[Any], None] | None:
        """Commands recording a task job's failure (None when the job is not in a task)."""
        if self.tasks is None or not isinstance(payload.get("task_id"), str):
            return None
        tasks, now = self.tasks, self.clock()
        fields: dict[str, Any] = {"error_class": error_class_name(exc), "error_message": str(exc)[:MAX_MESSAGE]}
        if status in ("failed", "error"):
            fields["finished_at"] = now
        return lambda pipe: tasks.transition(payload, None, status, message, pipe=pipe, **fields)

    def exhausted(self, job: Any, payload: dict[str, Any], exc: BaseException) -> Callable[[Any], None] | None:
        """Run the hooks and return the commands that put the payload in the dead set (if wanted)."""
        if job is not None:
            try:
                job.retries_exhausted(payload, exc)
            except Exception:
                log.exception("retries_exhausted of %s raised", payload.get("class"))
        for handler in self.death_handlers:
            try:
                handler(payload, exc)
            except Exception:
                log.exception("death handler %r raised", handler)
        final = self._task(payload, "error", f"error: {payload.get('error_class')}: {exc}; no retries left", exc)
        if payload.get("dead") is False:
            log.warning("%s %s exhausted its retries and has dead=False: dropped",
                        payload.get("class"), payload.get("jid"))
            return final
        log.warning("%s %s moved to the dead set: %s", payload.get("class"), payload.get("jid"),
                    payload.get("error_class"))
        bury = self.to_dead(encode(payload))
        if final is None:
            return bury

        def bury_and_record(pipe: Any) -> None:
            bury(pipe)
            final(pipe)
        return bury_and_record

    def to_dead(self, blob: str | bytes) -> Callable[[Any], None]:
        """Commands adding `blob` to `dead`, trimmed by age and size like Sidekiq's DeadSet#kill."""
        now = self.clock()
        cutoff = now - self.config.dead_timeout
        cap = self.config.dead_max_jobs

        def apply(pipe: Any) -> None:
            pipe.zadd(keys.DEAD, {blob: now})
            pipe.zremrangebyscore(keys.DEAD, "-inf", cutoff)
            pipe.zremrangebyrank(keys.DEAD, 0, -(cap + 1))

        return apply


def payload_name(job: Any) -> str:
    return getattr(job, "name", type(job).__name__)
