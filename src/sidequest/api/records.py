"""Jobs as the admin API shows them: one stored entry, its exact bytes and its payload.

`JobRecord` is a job waiting in a queue, `SortedEntry` one in `schedule`, `retry` or `dead`
(Sidekiq's names). Each keeps the bytes it was read as (`value`); its actions name those bytes,
so an action on an entry that moved meanwhile writes nothing and returns False.

Every time is read as epoch seconds, whether it was written as float seconds (Sidekiq 6/7,
sidequest) or integer milliseconds (Sidekiq 8): see `epoch_of`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from sidequest.errors import PayloadError
from sidequest.jobs.active_job import job_data
from sidequest.jobs.payload import decode, display_name, epoch
from sidequest.worker.retry import decompress_backtrace

if TYPE_CHECKING:
    from sidequest.api.actions import Actions


def epoch_of(value: Any) -> float | None:
    """A stored time as epoch seconds, or None: a payload number or a Redis string, in float
    seconds (Sidekiq 6/7) or integer milliseconds (Sidekiq 8)."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    seconds = epoch(value)
    return seconds if seconds is not None and math.isfinite(seconds) else None


def glob_escape(text: str) -> str:
    """`text` as a literal inside a Redis MATCH pattern (SCAN's glob)."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


def parse(value: bytes) -> tuple[dict[str, Any], bool]:
    """(payload, invalid): the decoded job, or whatever JSON object the bytes hold (or {}) with
    invalid True when they are not a usable job."""
    try:
        return decode(value), False
    except PayloadError:
        try:
            data = json.loads(value)
        except (ValueError, RecursionError):
            return {}, True
        return (data if isinstance(data, dict) else {}), True


class JobDict(TypedDict):
    """A stored job as plain JSON, for the dashboard and the CLI (`JobRecord.as_dict()`)."""

    jid: str | None
    """The job id (24 hex characters); None for an entry that is not a job."""
    class_name: str | None
    """The job's registered name: the payload's `class`."""
    display_class: str | None
    """The name to show: the class the payload wraps (an ActiveJob's), else `class_name`."""
    args: list[Any]
    """The job's arguments (for bytes that are not JSON: the text, as the only argument)."""
    kwargs: dict[str, Any]
    """A Python job's keyword arguments (the payload's `kwargs`); {} when it has none."""
    queue: str
    """The queue it is in, or will go to."""
    enqueued_at: float | None
    """When it was last pushed to a queue, epoch seconds; None while scheduled."""
    created_at: float | None
    """When it was first pushed, epoch seconds."""
    failed_at: float | None
    """When it first failed, epoch seconds; None if it never failed."""
    retried_at: float | None
    """When it last failed on a retry, epoch seconds."""
    retry_count: int | None
    """Failures so far less one (Sidekiq's count: 0 after the first failure); None if none."""
    error_class: str | None
    """The last error's class."""
    error_message: str | None
    """The last error's message."""
    score: float | None
    """In a sorted set: its time in epoch seconds (when it runs, or when it died); else None."""
    key: str | None
    """In a sorted set: `<score>-<jid>`, which `JobSet.get(key)` finds again; else None."""
    invalid: bool
    """True when the stored bytes are not a usable job."""
    item: dict[str, Any]
    """The whole payload as stored."""


class JobRecord:
    """A job waiting in a queue (Sidekiq's `JobRecord`).

    `value` is the entry exactly as stored, `item` its payload (`{}` when the bytes are not JSON;
    `invalid` is True whenever they are not a usable job).
    """

    def __init__(self, value: bytes, queue: str | None, actions: Actions,
                 on_left: Callable[[], None] | None = None) -> None:
        self.value = value
        self.item, self.invalid = parse(value)
        stated = self.item.get("queue")
        self.queue: str = queue or (stated if isinstance(stated, str) and stated else "default")
        self._actions = actions
        self._on_left = on_left  # tells an iteration that an entry before its cursor left

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.klass} jid={self.jid}>"

    def __getitem__(self, name: str) -> Any:
        return self.item[name]

    def get(self, name: str, default: Any = None) -> Any:
        """A payload field, or `default`."""
        return self.item.get(name, default)

    @property
    def jid(self) -> str | None:
        jid = self.item.get("jid")
        return jid if isinstance(jid, str) else None

    @property
    def klass(self) -> str | None:
        """The job's registered name (the payload's `class`; Sidekiq's `klass`)."""
        name = self.item.get("class")
        return name if isinstance(name, str) else None

    @property
    def display_class(self) -> str | None:
        """The name to show: the class a payload wraps (an ActiveJob's, a Django task's), else
        `klass` (Sidekiq's `display_class`)."""
        return display_name(self.item) if self.klass is not None else None

    @property
    def display_args(self) -> list[Any]:
        """The arguments to show: an ActiveJob wrapper's ActiveJob arguments (as Sidekiq 6/7
        show them, serialized), else `args`."""
        data = job_data(self.item) if self.klass is not None and isinstance(self.item.get("args"), list) else None
        return data["arguments"] if data is not None else self.args

    @property
    def args(self) -> list[Any]:
        args = self.item.get("args")
        if isinstance(args, list):
            return args
        return [] if self.item else [self.value.decode("utf-8", "replace")]

    @property
    def kwargs(self) -> dict[str, Any]:
        """A Python job's keyword arguments (the payload's `kwargs`); {} when it has none."""
        kwargs = self.item.get("kwargs")
        return kwargs if isinstance(kwargs, dict) else {}

    @property
    def enqueued_at(self) -> float | None:
        return epoch_of(self.item.get("enqueued_at"))

    @property
    def created_at(self) -> float | None:
        return epoch_of(self.item.get("created_at", self.item.get("enqueued_at")))

    @property
    def failed_at(self) -> float | None:
        return epoch_of(self.item.get("failed_at"))

    @property
    def retried_at(self) -> float | None:
        return epoch_of(self.item.get("retried_at"))

    @property
    def retry_count(self) -> int | None:
        count = self.item.get("retry_count")
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    @property
    def error_class(self) -> str | None:
        value = self.item.get("error_class")
        return value if isinstance(value, str) else None

    @property
    def error_message(self) -> str | None:
        value = self.item.get("error_message")
        return value if isinstance(value, str) else None

    @property
    def error_backtrace(self) -> list[str] | None:
        """The failure's backtrace lines, innermost first, when the job asked for them."""
        blob = self.item.get("error_backtrace")
        if not isinstance(blob, str):
            return None
        try:
            lines = decompress_backtrace(blob)
        except (ValueError, TypeError):
            return None
        return [str(line) for line in lines] if isinstance(lines, list) else None

    @property
    def tags(self) -> list[Any]:
        tags = self.item.get("tags")
        return tags if isinstance(tags, list) else []

    def latency(self, now: float | None = None) -> float:
        """Seconds since it was enqueued (or created); 0.0 without either time."""
        at = self.enqueued_at or self.created_at
        if at is None:
            return 0.0
        return (self._actions.client.clock() if now is None else now) - at

    def delete(self) -> bool:
        """Remove this job from its queue; False if it was no longer there (taken or deleted)."""
        call = self._actions.delete(self._actions.space.queue(self.queue), self.value, self._payload(), where="1")
        return self._left(self._actions.one(call))

    def as_dict(self) -> JobDict:
        return {
            "jid": self.jid, "class_name": self.klass, "display_class": self.display_class, "args": self.args,
            "kwargs": self.kwargs, "queue": self.queue, "enqueued_at": self.enqueued_at,
            "created_at": self.created_at, "failed_at": self.failed_at, "retried_at": self.retried_at,
            "retry_count": self.retry_count, "error_class": self.error_class, "error_message": self.error_message,
            "score": None, "key": None, "invalid": self.invalid, "item": self.item,
        }

    # -- for subclasses ----------------------------------------------------------------------
    def _payload(self) -> dict[str, Any] | None:
        """The payload for lifecycle operations: None for bytes that are not a job."""
        return None if self.invalid else self.item

    def _left(self, moved: bool) -> bool:
        if moved and self._on_left is not None:
            self._on_left()
        return moved


class SortedEntry(JobRecord):
    """A job in `schedule`, `retry` or `dead` (Sidekiq's `SortedEntry`), with its score.

    In Cluster mode `set_key` is its queue's own set (`retry:{q}`...) and `home` that queue: a
    retry puts it back on `queue:{q}`, a kill into `dead:{q}`, each move within the slot of `q`.
    """

    def __init__(self, value: bytes, score: float, set_key: str, actions: Actions,
                 on_left: Callable[[], None] | None = None, home: str | None = None) -> None:
        super().__init__(value, None, actions, on_left)
        self.set_key = set_key  # the sorted set it was read from
        self.home = home  # Cluster mode: the queue whose set `set_key` is; else None
        self.raw_score = float(score)  # exactly as stored (what `key` carries)

    @property
    def score(self) -> float:
        """Its time in epoch seconds: when it runs (schedule, retry) or when it died (dead)."""
        return epoch_of(self.raw_score) or 0.0

    at = score  # Sidekiq's name for the same time

    @property
    def key(self) -> str:
        """`<score>-<jid>`: names this entry in a URL or a command; `JobSet.get(key)` reads it back."""
        return f"{self.raw_score!r}-{self.jid or ''}"

    @property
    def has_error(self) -> bool:
        """True when the job carries an error (Sidekiq's `error?`)."""
        return self.error_class is not None

    def retry(self) -> bool:
        """Put the job on its queue now, one `retry_count` lower, so a manual retry does not count
        against its retries (Sidekiq's `SortedEntry#retry`). False if the entry was gone."""
        return self._left(self._actions.one(self._actions.requeue(self.set_key, self.value, self._payload(),
                                                                  retry=True, home=self.home)))

    def add_to_queue(self) -> bool:
        """Run now: put the job on its queue unchanged but for `enqueued_at` (Sidekiq's
        `add_to_queue`, the dashboard's "run now"). False if the entry was gone."""
        return self._left(self._actions.one(self._actions.requeue(self.set_key, self.value, self._payload(),
                                                                  retry=False, home=self.home)))

    def kill(self) -> bool:
        """Move the job, unchanged, to the dead set. False if the entry was gone."""
        moved = self._actions.one(self._actions.kill(self.set_key, self.value, self._payload(), self.home))
        if moved and self.set_key == self._actions.dead_key(self.home, self._payload()):
            return True  # it stays in this set, with a new score
        return self._left(moved)

    def delete(self) -> bool:
        """Remove the entry. False if it was gone."""
        return self._left(self._actions.one(self._actions.delete(self.set_key, self.value, self._payload())))

    def reschedule(self, at: float) -> bool:
        """Change its time to `at` (epoch seconds), if it is still there."""
        changed = self._actions.redis.zadd(self.set_key, {self.value: at}, xx=True, ch=True)
        if int(changed) == 1:  # type: ignore[arg-type]
            self.raw_score = float(at)
            return True
        return bool(self._actions.redis.zscore(self.set_key, self.value) == at)

    def as_dict(self) -> JobDict:
        data = super().as_dict()
        data["score"] = self.score
        data["key"] = self.key
        return data
