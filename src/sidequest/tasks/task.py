"""Tasks: many jobs under one id, each job's whole life recorded, progress and callbacks.

    task = Task.create("sign up 200 products", meta={"seller": 42}, on_complete=notify)
    jids = task.add_bulk(signup, [[p] for p in product_ids])
    task.seal()                                  # no more jobs: completion may now fire
    Task.find(task.id).status()                  # {"counts": {...}, "percent": 37.5, "done": False, ...}
    Task.find(task.id).events(status="failed")   # why the failed ones failed

Each job of a task carries `task_id` in its payload and has an event record: `status` (enqueued,
working, finished, failed, error), `params`, timestamped `messages`, start and finish times,
and the error's class and message. The worker keeps them current through `TaskFeature`, a
feature of the job lifecycle (see `lifecycle`): working when a job is taken; finished when it
returns; failed when it raises `JobFailed` (a business failure, never retried); back to
enqueued with an "error ... waiting for retry" message when a retry is scheduled, or when
shutdown or recovery puts it back, or a full rate limit snoozes it ("waiting for a rate limit");
error when no retry is left, or with the message "cancelled" when it was cancelled. An
operator's retry or run-now through the admin API (`api`) makes it enqueued again, a delete or
kill makes it error, with a message saying an operator did it. Every change runs inside the atomic call that moves the
job, and moves the counters and the status index together; the change that completes a sealed
task enqueues its callbacks, so counts never drift and `on_complete`/`on_success` are enqueued
exactly once.

Every key of a task expires: `ttl` (the `task_ttl` setting, 7 days by default) after its last
change while it runs, so a task that is never sealed, or whose jobs never all end, goes away by
itself; `retention` after it completes. Adding a job scheduled further ahead makes room for it.

The seed did this in server middleware (four round trips per job); here "finished" rides on the
processor's next fetch and the failures on the call that files them, so a task job costs one
extra round trip (its "working" record) over a plain job.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import secrets
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, cast

import redis

from . import keys
from .client import Client, default_client
from .errors import JobFailed
from .job import JobSetter
from .options import check_options, merge_options
from .outcome import EXPIRED, Outcome, error_class_name
from .payload import encode
from .scripts import TASK_FEATURE, TASK_SEAL, TASK_TRANSITION

RETENTION = 7 * 24 * 3600.0
TTL = 7 * 24 * 3600.0  # an unfinished task's lifetime after its last change (`task_ttl`)
FINAL = ("finished", "failed", "error")
# The recent tasks index (`keys.TASKS_RECENT`) keeps at most this many, none older than this:
# each task's creation trims it, so it never grows past the bound whatever the workload.
RECENT_LIMIT = 10_000
RECENT_AGE = RETENTION

# (recorder, task id, jid) of the task job running on this thread, for `task_message`.
_current: contextvars.ContextVar[tuple[TaskRecorder, str, str] | None] = contextvars.ContextVar(
    "sidequest_task", default=None)


def _unpack(job: Any) -> tuple[Any, dict[str, Any]]:
    if isinstance(job, JobSetter):
        return job.job_class, dict(job.options)
    return job, {}


class Task:
    def __init__(self, task_id: str, client: Client | None = None, retention: float = RETENTION,
                 ttl: float | None = None) -> None:
        self.id = task_id
        self.client = client or default_client()
        self.retention = retention
        self.ttl = self.client.config.task_ttl if ttl is None else ttl  # while it is unfinished

    @property
    def redis(self) -> redis.Redis:
        return self.client.redis

    # -- creating --------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, *, meta: dict[str, Any] | None = None, on_complete: Any = None,
               on_success: Any = None, client: Client | None = None, retention: float = RETENTION,
               ttl: float | None = None) -> Task:
        """Open a new task. Callbacks are jobs, enqueued with args `[task_id]` when it completes.
        Its records expire `ttl` s (default: the client's `task_ttl`) after its last change, and
        `retention` s after it completes."""
        task = cls(secrets.token_hex(12), client, retention, ttl)
        now = task.client.clock()
        fields: dict[str, Any] = {
            "name": name, "meta": json.dumps(meta or {}), "created_at": now, "sealed": "0", "total": 0,
            **{f"count:{s}": 0 for s in keys.TASK_STATUSES},
        }
        for field, callback in (("on_complete", on_complete), ("on_success", on_success)):
            if callback is not None:
                job, options = _unpack(callback)
                entries, _ = task.client.build(job, [[task.id]], [None], now, options)
                if entries:
                    payload = entries[0][0]
                    fields[field] = encode(payload)[:-1]  # the script appends enqueued_at and "}"
                    fields[f"{field}:queue"] = payload["queue"]
        pipe = task.redis.pipeline(transaction=True)  # one round trip: the task and its place in the index
        pipe.hset(keys.task(task.id), mapping=fields)  # type: ignore[arg-type]  # redis-py: invariant key type
        pipe.expire(keys.task(task.id), _seconds(task.ttl))
        pipe.zadd(keys.TASKS_RECENT, {task.id: now})
        pipe.zremrangebyscore(keys.TASKS_RECENT, "-inf", f"({now - RECENT_AGE}")
        pipe.zremrangebyrank(keys.TASKS_RECENT, 0, -RECENT_LIMIT - 1)
        pipe.expire(keys.TASKS_RECENT, int(RECENT_AGE))  # no task created for that long: every entry is too old
        pipe.execute()
        return task

    def add(self, job: Any, *args: Any, at: Any = None, in_: Any = None, **options: Any) -> str | None:
        """Add one job: a job, `job.set(...)`, or a job name, with job options as keywords."""
        now = self.client.clock()
        when = self.client.schedule_time(at, in_, now)
        return self._add(job, [list(args)], [when], now, options)[0]

    def add_bulk(self, job: Any, args_list: Iterable[Any], *, at: Any = None, **options: Any) -> list[str | None]:
        """Add many jobs in one transaction (events and counters included)."""
        now = self.client.clock()
        all_args = list(args_list)
        return self._add(job, all_args, self.client.bulk_times(at, len(all_args), now), now, options)

    def _add(self, job: Any, args_list: list[Any], times: list[float | None], now: float,
             extra: dict[str, Any]) -> list[str | None]:
        target, options = _unpack(job)
        options = merge_options(options, check_options(extra))
        options = merge_options(options, {"custom": {"task_id": self.id}})
        entries, jids = self.client.build(target, args_list, times, now, options)
        if not entries:
            return jids
        # the task outlives its last job's time by `ttl`, so a job scheduled far ahead finds it
        ttl = self.ttl + max([0.0, *((t - now) for t in times if t is not None)])

        def record(pipe: Any) -> None:
            events = {p["jid"]: json.dumps({"jid": p["jid"], "class": p["class"], "status": "enqueued",
                                            "params": p["args"], "messages": [], "queued_at": now},
                                           separators=(",", ":"))
                      for p, _ in entries}
            # positions only order the event lists; jobs added concurrently may share one
            read = self.redis.pipeline(transaction=False)
            read.hget(keys.task(self.id), "total")
            read.ttl(keys.task(self.id))
            total, left = read.execute()
            base = int(total or 0)
            order = {jid: base + i for i, jid in enumerate(events)}
            pipe.hset(keys.task_events(self.id), mapping=events)
            pipe.zadd(keys.task_order(self.id), order)
            pipe.zadd(keys.task_index(self.id, "enqueued"), order)
            pipe.hincrby(keys.task(self.id), "total", len(events))
            pipe.hincrby(keys.task(self.id), "count:enqueued", len(events))
            for key in keys.task_keys(self.id):  # never sooner than before: an earlier job may be further ahead
                pipe.expire(key, max(_seconds(ttl), left))

        self.client.write(entries, now, also=record)
        return jids

    def seal(self) -> None:
        """No more jobs will be added; the task completes when every job has reached an end."""
        seal = self.redis.register_script(TASK_SEAL)
        args = [self.client.clock(), int(self.retention), _seconds(self.ttl)]
        if seal(keys=keys.task_keys(self.id), args=args) == -1:
            raise LookupError(f"task {self.id} does not exist (or has expired)")

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def find(cls, task_id: str, client: Client | None = None) -> Task | None:
        """The task with this id, or None if there is none (or it expired)."""
        task = cls(task_id, client)
        return task if task.redis.exists(keys.task(task_id)) else None

    @classmethod
    def recent(cls, offset: int = 0, limit: int = 25,
               client: Client | None = None) -> tuple[int, list[dict[str, Any]]]:
        """The tasks created last, newest first, each as `status()` gives it: (how many the
        index holds, `limit` of them from `offset`). A task whose records expired after it
        completed is `{"id": ..., "expired": True}`. Two round trips, whatever the index holds.

            total, newest = Task.recent(limit=10)
        """
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        redis_client = (client or default_client()).redis
        pipe = redis_client.pipeline(transaction=False)
        pipe.zcard(keys.TASKS_RECENT)
        pipe.zrevrange(keys.TASKS_RECENT, offset, offset + limit - 1)
        total, members = pipe.execute()
        ids = [member.decode() for member in members]
        if not ids:
            return int(total), []
        pipe = redis_client.pipeline(transaction=False)
        for task_id in ids:
            pipe.hgetall(keys.task(task_id))
        return int(total), [_status(task_id, stored) if stored else {"id": task_id, "expired": True}
                            for task_id, stored in zip(ids, pipe.execute(), strict=True)]

    def status(self) -> dict[str, Any]:
        stored = cast("dict[bytes, bytes]", self.redis.hgetall(keys.task(self.id)))
        if not stored:
            raise LookupError(f"task {self.id} does not exist (or has expired)")
        return _status(self.id, stored)

    def events(self, status: str | None = None, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
        """Events in the order jobs were added, optionally of one status, paged."""
        if status is not None and status not in keys.TASK_STATUSES:
            raise ValueError(f"status must be one of {', '.join(keys.TASK_STATUSES)}; got {status!r}")
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        index = keys.task_index(self.id, status) if status else keys.task_order(self.id)
        jids = cast("list[bytes]", self.redis.zrange(index, offset, offset + limit - 1))
        if not jids:
            return []
        return [_event(json.loads(raw)) for raw in self.redis.hmget(keys.task_events(self.id), jids) if raw]


def _status(task_id: str, stored: dict[bytes, bytes]) -> dict[str, Any]:
    """What `Task.status` answers, from the task's hash."""
    raw = {k.decode(): v.decode() for k, v in stored.items()}
    counts = {s: int(raw.get(f"count:{s}", 0)) for s in keys.TASK_STATUSES}
    total = int(raw.get("total", 0))
    ended = sum(counts[s] for s in FINAL)
    return {
        "id": task_id, "name": raw.get("name", ""), "total": total, "counts": counts,
        "done": "completed_at" in raw, "sealed": raw.get("sealed") == "1",
        # an empty task is done once sealed: nothing is left to do
        "percent": round(100.0 * ended / total, 2) if total else (100.0 if raw.get("sealed") == "1" else 0.0),
        "created_at": float(raw["created_at"]) if "created_at" in raw else None,
        "completed_at": float(raw["completed_at"]) if "completed_at" in raw else None,
        "meta": json.loads(raw.get("meta", "{}")),
    }


def _event(data: dict[str, Any]) -> dict[str, Any]:
    messages = data.get("messages")
    return {
        "jid": data.get("jid"), "class": data.get("class"), "status": data.get("status"),
        "params": data.get("params", []),
        "messages": messages if isinstance(messages, list) else [],  # Lua writes [] as {}
        "error_class": data.get("error_class"), "error_message": data.get("error_message"),
        "started_at": data.get("started_at"), "finished_at": data.get("finished_at"),
        "progress": data.get("progress"),
    }


# -- recording: the tasks feature of the job lifecycle ------------------------------------------
class TaskRecorder:
    """Writes event changes outside a job's lifecycle calls (`task_message` from inside a job)."""

    def __init__(self, client: redis.Redis, retention: float = RETENTION, clock: Any = time.time,
                 ttl: float = TTL) -> None:
        self.redis = client
        self.script = client.register_script(TASK_TRANSITION)
        self.retention = retention
        self.ttl = ttl  # every change keeps an unfinished task this long
        self.clock = clock

    def transition(self, task_id: str, jid: str, status: str, message: str = "", **fields: Any) -> None:
        """Move the event of `jid` to `status` ('' keeps it) and append `message`."""
        self.script(keys=keys.task_keys(task_id),
                    args=[jid, status, self.clock(), message, json.dumps(fields), int(self.retention),
                          _seconds(self.ttl)])


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
                _seconds(self.recorder.ttl + max(wait, 0.0))]

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything a task records is written by `ops`, with the job's move."""

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        task_id, jid = payload.get("task_id"), payload.get("jid")
        if not isinstance(task_id, str) or not isinstance(jid, str):
            return None
        return _running(self.recorder, task_id, jid)


def _seconds(ttl: float) -> int:
    """A TTL for EXPIRE: whole seconds, at least one (EXPIRE 0 would delete the key)."""
    return max(1, math.ceil(ttl))


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
