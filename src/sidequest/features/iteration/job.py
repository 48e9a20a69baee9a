"""`IterableJob`: a job that walks an enumerator of `(item, cursor)` pairs and saves its cursor.

A slice of the job runs items until one of these ends it, each checked before the next item:

- the enumerator is exhausted: completed (`on_complete`, `on_stop`);
- the worker is quieted or stopping, or the slice has run `max_iteration_runtime` seconds: the
  cursor is saved and the job raises `Interrupted`, which the worker files as a snooze with no
  delay: in the same atomic call that ends this slice, the job goes to `schedule` due now, and
  the next poll anywhere puts it back on its queue. No retry is spent, no failure counted.
- `sidequest.cancel(jid)`: the cursor is saved and the job ends as cancelled.

A slice that ends any other way (`kill -9`, a crash, a shutdown deadline passed inside a long
item, an exception from `each_iteration`) leaves the last saved cursor; the job runs again
(recovery, put-back or retry) and resumes after it. Saves happen every `checkpoint_every` items
or `checkpoint_interval` seconds, whichever comes first, so at most `checkpoint_every` items are
handled twice after such an end; none after a clean interruption. Nothing is ever skipped:
a cursor is saved only once every item up to it has been handled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, ClassVar, NoReturn

from sidequest.client.sync_client import default_client
from sidequest.errors import Cancelled, OverLimit
from sidequest.features.cancellation import cancelled
from sidequest.features.iteration.state import Store
from sidequest.jobs.definition import Job
from sidequest.worker.processor import stopping

log = logging.getLogger(__name__)


class Interrupted(OverLimit):
    """Ends a slice of an iterable job that is to resume: the worker re-enqueues the job at once.

    A subclass of `OverLimit` because its fate is a snooze (back to `schedule`, no retry spent),
    written by the worker in the call that ends the slice, so no copy is lost or doubled."""

    def __init__(self, reason: str) -> None:
        super().__init__("iteration", 0.0)
        self.reason = reason
        self.args = (f"iteration interrupted ({reason}); re-enqueued to resume from its cursor",)


class IterableJob(Job, abstract=True):
    """Base class of resumable jobs. Define `build_enumerator(*args, cursor)` and
    `each_iteration(item, *args)`; the options are class attributes:

        class Reindex(sidequest.IterableJob, queue="low"):
            checkpoint_every = 100           # save the cursor after this many items...
            checkpoint_interval = 5.0        # ...or this many seconds, whichever comes first
            max_iteration_runtime = 300.0    # end a slice after this long; the rest is re-enqueued

            def build_enumerator(self, *args, cursor): ...
            def each_iteration(self, item, *args): ...

    `build_enumerator` receives the cursor of the last item handled (None at the start) and
    yields the items after it, each with its own cursor (any JSON value). `self.cursor` is that
    cursor while the job runs. Hooks: `on_start` (first slice), `on_resume` (later slices),
    `on_stop` (every slice's end), `on_complete` (once, when the enumerator is exhausted).
    """

    checkpoint_every: ClassVar[int] = 100
    checkpoint_interval: ClassVar[float] = 5.0
    max_iteration_runtime: ClassVar[float | None] = None

    cursor: Any = None

    def build_enumerator(self, *args: Any, cursor: Any) -> Iterable[tuple[Any, Any]]:
        raise NotImplementedError(f"{type(self).__qualname__} must define build_enumerator()")

    def each_iteration(self, item: Any, *args: Any) -> None:
        raise NotImplementedError(f"{type(self).__qualname__} must define each_iteration()")

    def on_start(self) -> None:
        """Called before the first item of the job's first slice."""

    def on_resume(self) -> None:
        """Called before the first item of every later slice."""

    def on_stop(self) -> None:
        """Called at the end of every slice (interrupted, cancelled or completed)."""

    def on_complete(self) -> None:
        """Called once, when the enumerator is exhausted."""

    def perform(self, *args: Any) -> None:
        store = Store(default_client().redis, self.jid, self.name)
        found = store.begin()
        if found.state in ("completed", "cancelled"):
            log.info("iteration already %s; nothing to do", found.state)
            return
        self.cursor = found.cursor
        (self.on_resume if found.executions else self.on_start)()
        _Slice(self, store).run(args)


class _Slice:
    """One run of an iterable job: its loop, its pending counts, its reasons to stop."""

    def __init__(self, job: IterableJob, store: Store) -> None:
        self.job = job
        self.store = store
        self.started = self.saved_at = time.monotonic()
        self.pending = 0  # items handled since the last save
        self.pending_time = 0.0

    def run(self, args: tuple[Any, ...]) -> None:
        job = self.job
        for item, cursor in job.build_enumerator(*args, cursor=job.cursor):
            reason = self._reason_to_stop()
            if reason is not None:
                self._end(reason)
            began = time.monotonic()
            try:
                job.each_iteration(item, *args)
            except BaseException:
                self._save()  # the items before this one are done: a retry starts here
                raise
            self.pending_time += time.monotonic() - began
            self.pending += 1
            job.cursor = cursor
            if self._due() and self._save():
                self._end("cancelled")
        self._save("completed")
        log.info("iteration completed at cursor %r", job.cursor)
        job.on_complete()
        job.on_stop()

    def _reason_to_stop(self) -> str | None:
        if cancelled():
            return "cancelled"
        if stopping():
            return "the worker is stopping"
        limit = self.job.max_iteration_runtime
        if limit is not None and time.monotonic() - self.started >= limit:
            return f"max_iteration_runtime {limit:g} s"
        return None

    def _due(self) -> bool:
        return (self.pending >= self.job.checkpoint_every
                or time.monotonic() - self.saved_at >= self.job.checkpoint_interval)

    def _save(self, state: str = "running") -> bool:
        flagged = self.store.save(self.job.cursor, self.pending, self.pending_time, state)
        self.pending, self.pending_time, self.saved_at = 0, 0.0, time.monotonic()
        return flagged

    def _end(self, reason: str) -> NoReturn:
        cancelling = reason == "cancelled"
        self._save("cancelled" if cancelling else "interrupted")
        log.info("iteration stopped at cursor %r: %s", self.job.cursor, reason)
        self.job.on_stop()
        if cancelling:
            raise Cancelled(f"iteration cancelled at cursor {self.job.cursor!r}")
        raise Interrupted(reason)
