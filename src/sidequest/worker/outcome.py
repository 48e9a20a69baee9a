"""A job's fate as a value: how processing one job ended, computed without Redis.

    done       it returned
    retry      it failed, or asked to run again (`sidequest.Retry`); `blob` goes to `retry` at `at`
    dead       it failed for good (or could not be decoded); `blob` goes to `dead` at `at`
    dropped    it ended and leaves no entry (retry=False, dead=False, a business failure, discard_on)
    put_back   it did not run to an end (shutdown); it goes back to the head of its queue unchanged
    snoozed    a rate limit was full (`OverLimit`); `blob` goes to `schedule` at `at`, no retry spent;
               or a durable sleep or wait parked it there (`Suspended`; its payload carries `errors.WAITING`)
    cancelled  it stopped because it was cancelled (`Cancelled`); acknowledged, leaves no entry

The unit of work applies an outcome in one atomic call that first checks the job is still
held by this processor (see `fetch` and `scripts.SETTLE`); hooks run only after that call
committed. `invalid` builds the dead entry of bytes that are not a usable job: they are kept
exactly, inside a wrapper Sidekiq's DeadSet can read.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from sidequest.errors import Retry
from sidequest.jobs.payload import encode, new_jid

Kind = Literal["done", "retry", "dead", "dropped", "put_back", "snoozed", "cancelled"]

INVALID_CLASS = "sidequest.InvalidPayload"
EXPIRED = "expired"  # the reason of a job dropped unstarted past its deadline (`expires_in`)


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    blob: bytes | str | None = None  # the entry to write (retry, dead, snoozed)
    at: float | None = None  # its score: retry or snooze time, or time of death
    payload: dict[str, Any] | None = None  # the payload as filed (error fields included), for hooks
    error: BaseException | None = field(default=None, compare=False)
    exhausted: bool = False  # the job used up its retries: retries_exhausted and death handlers run
    reason: str = ""  # a few words for logs and features (why dropped, why dead)
    elapsed: float | None = None  # seconds the run took (None: it did not run)
    result: Any = field(default=None, compare=False)  # what a done job returned (kept only with result_ttl)
    logged: bool = False  # its one log line, fate included, is written already (an unknown job's)
    origin: str | None = None  # the queue it was taken from, where `payload` now names its `retry_queue`

    @classmethod
    def done(cls, elapsed: float | None = None, result: Any = None) -> Outcome:
        return cls("done", elapsed=elapsed, result=result)

    @classmethod
    def put_back(cls) -> Outcome:
        return cls("put_back")

    @property
    def requested(self) -> bool:
        """A retry the job asked for (`sidequest.Retry`) within its limit: not a failure (not
        counted failed, no error handlers, no `after_failed`)."""
        return self.kind == "retry" and isinstance(self.error, Retry)


def error_class_name(exc: BaseException) -> str:
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def invalid(raw: bytes, queue: str, error_class: str, message: str, now: float | None = None) -> Outcome:
    """The dead entry for bytes that cannot be decoded or re-encoded as a job.

    The original bytes are the wrapper's only argument, unchanged: as text when they are UTF-8,
    else base64 (and `"encoding": "base64"`), so nothing is lost and nothing needs to parse them.
    """
    when = time.time() if now is None else now
    try:
        original: str = raw.decode("utf-8")
        extra: dict[str, Any] = {}
    except UnicodeDecodeError:
        original = base64.b64encode(raw).decode("ascii")
        extra = {"encoding": "base64"}
    entry = {"class": INVALID_CLASS, "args": [original], "queue": queue, "jid": new_jid(), "retry": False,
             **extra, "error_class": error_class, "error_message": message[:10_000],
             "failed_at": when, "retry_count": 0}
    return Outcome("dead", blob=encode(entry), at=when, payload=entry, reason=f"{error_class}: {message}")
