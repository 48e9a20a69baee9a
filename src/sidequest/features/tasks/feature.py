"""The tasks feature of the job lifecycle: each task job's event kept current at every point of
its life, and `task_message` for the job itself.

Each job of a task carries `task_id` in its payload and has an event record: `status` (enqueued,
working, finished, failed, error), `params`, timestamped `messages`, start and finish times,
and the error's class and message. The worker keeps them current through `TaskFeature` (see
`lifecycle`): working when a job is taken; finished when it returns; failed when it raises
`JobFailed` (a business failure, never retried); back to enqueued with an "error ... waiting for
retry" message when a retry is scheduled, or when shutdown or recovery puts it back, or a full
rate limit snoozes it ("waiting for a rate limit"); error when no retry is left, or with the
message "cancelled" when it was cancelled. An operator's retry or run-now through the admin API
(`api`) makes it enqueued again, a delete or kill makes it error, with a message saying an
operator did it. Every change runs inside the atomic call that moves the job (`TASK_FEATURE`,
see `lua`), and moves the counters and the status index together; the change that completes a
sealed task enqueues its callbacks, so counts never drift and `on_complete`/`on_success` are
enqueued exactly once.

The seed did this in server middleware (four round trips per job); here "finished" rides on the
processor's next fetch and the failures on the call that files them, so a task job costs one
extra round trip (its "working" record) over a plain job.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import redis

from sidequest.errors import JobFailed
from sidequest.features.tasks.lua import TASK_FEATURE, TASK_TRANSITION, cluster_lua
from sidequest.features.tasks.task import RETENTION, TTL, expire_seconds
from sidequest.store import keys
from sidequest.worker.outcome import EXPIRED, Outcome, error_class_name

# (recorder, task id, jid) of the task job running on this thread, for `task_message`.
_current: contextvars.ContextVar[tuple[TaskRecorder, str, str] | None] = contextvars.ContextVar(
    "sidequest_task", default=None)


class TaskRecorder:
    """Writes event changes outside a job's lifecycle calls (`task_message` from inside a job)."""

    def __init__(self, client: redis.Redis, retention: float = RETENTION, clock: Any = time.time,
                 ttl: float = TTL) -> None:
        self.redis = client
        self.cluster = keys.space(client).cluster
        self.script = client.register_script(cluster_lua(TASK_TRANSITION) if self.cluster else TASK_TRANSITION)
        self.retention = retention
        self.ttl = ttl  # every change keeps an unfinished task this long
        self.clock = clock

    def transition(self, task_id: str, jid: str, status: str, message: str = "", **fields: Any) -> None:
        """Move the event of `jid` to `status` ('' keeps it) and append `message`."""
        self.script(keys=keys.task_keys(task_id),
                    args=[jid, status, self.clock(), message, json.dumps(fields), int(self.retention),
                          expire_seconds(self.ttl)])


class TaskFeature:
    """Keeps each task job's event current at every point of its life (see `lifecycle`).

    The operation runs in the same atomic call that moves the job, with the task id and jid
    read from the decoded payload, so a job's event can never disagree with where the job is.
    """

    name = "task"
    marks: frozenset[str] | None = frozenset({"task_id"})  # ops only for payloads with these keys
    observes, wraps = False, True  # whether `observe` and `running` ever do anything
    lua = TASK_FEATURE

    def __init__(self, recorder: TaskRecorder) -> None:
        self.recorder = recorder
        if recorder.cluster:  # a task lives in its queue's slot (see `lua`)
            self.lua = cluster_lua(TASK_FEATURE)

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        task_id, jid = payload.get("task_id"), payload.get("jid")
        if not isinstance(task_id, str) or not isinstance(jid, str):
            return None
        now = self.recorder.clock()
        change = _event_change(point, payload, outcome, now)
        if change is None:
            return None
        status, message, fields = change
        wait = outcome.at - now if outcome is not None and outcome.at is not None else 0.0  # a retry, a snooze
        return [task_id, jid, status, message, json.dumps(fields), int(self.recorder.retention),
                expire_seconds(self.recorder.ttl + max(wait, 0.0))]

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything a task records is written by `ops`, with the job's move."""

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        task_id, jid = payload.get("task_id"), payload.get("jid")
        if not isinstance(task_id, str) or not isinstance(jid, str):
            return None
        return _running(self.recorder, task_id, jid)


def _event_change(point: str, payload: dict[str, Any], outcome: Outcome | None,
                  now: float) -> tuple[str, str, dict[str, Any]] | None:
    """(status, message, fields) of a task job's event at a point of its life."""
    exc = outcome.error if outcome is not None else None
    error: dict[str, Any] = {}
    if exc is not None:
        error = {"error_class": error_class_name(exc), "error_message": str(exc)[:10_000]}
    described = f"{error_class_name(exc)}: {exc}" if exc is not None else ""
    if point == "taken":
        return "working", "working", {"started_at": now}
    if point == "finished":
        return "finished", "finished", {"finished_at": now}
    if point == "retried" and outcome is not None and outcome.at is not None:
        return "enqueued", (f"error: {described}; waiting for retry {payload.get('retry_count', 0) + 1} "
                            f"in {outcome.at - now:.0f} s"), error
    if point == "dropped":
        if outcome is not None and outcome.reason == EXPIRED:  # it never ran: nothing went wrong in it
            return "error", "expired: not started before its deadline (expires_in)", {"finished_at": now}
        if isinstance(exc, JobFailed):
            return "failed", f"failed: {exc}", {**error, "finished_at": now}
        return "error", f"error: {described}", {**error, "finished_at": now}
    if point == "dead":
        reason = f"{described}; no retries left" if exc is not None else (outcome.reason if outcome else "")
        fields = error or {"error_class": payload.get("error_class"), "error_message": payload.get("error_message")}
        return "error", f"error: {reason}", {**fields, "finished_at": now}
    if point == "put_back":
        return "enqueued", "error: interrupted by shutdown; requeued", {}
    if point == "snoozed":  # a full rate limit: it waits in `schedule`, nothing went wrong
        return "enqueued", "waiting for a rate limit", {}
    if point == "cancelled":  # no status of its own: an ended job that did not finish is an error
        return "error", "cancelled", {"finished_at": now}
    if point == "recovered":
        if outcome is not None and outcome.kind == "dead":
            message = str(payload.get("error_message", ""))
            return "error", message, {"error_class": payload.get("error_class"), "error_message": message,
                                      "finished_at": now}
        return "enqueued", "error: its worker process died; recovered", {}
    if point == "requeued":  # the admin API's points: an operator acted on the stored job
        return "enqueued", "requeued by an operator", {}
    if point == "deleted":
        return "error", "deleted by an operator", {"finished_at": now}
    if point == "killed":
        return "error", "killed by an operator", {"finished_at": now}
    return None


@contextlib.contextmanager
def _running(recorder: TaskRecorder, task_id: str, jid: str) -> Iterator[None]:
    """While a task job runs: what `task_message` writes to."""
    token = _current.set((recorder, task_id, jid))
    try:
        yield
    finally:
        _current.reset(token)


def task_message(text: str, *, progress: Any = None) -> None:
    """Inside a task job: append `text` to this job's messages (and set its progress)."""
    current = _current.get()
    if current is None:
        raise RuntimeError("task_message() is only available inside a job that belongs to a task")
    recorder, task_id, jid = current
    fields = {} if progress is None else {"progress": progress}
    recorder.transition(task_id, jid, "", str(text), **fields)
