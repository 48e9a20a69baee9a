"""A backend for Django's task framework: Django's `@task` functions run on sidequest workers.

    TASKS = {"default": {"BACKEND": "sidequest.contrib.django.TasksBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"result_ttl": 86400, "retry": 0}}}

    result = send_email.using(queue_name="emails").enqueue(to="a@example.com")
    send_email.get_result(result.id).status          # READY, RUNNING, SUCCESSFUL or FAILED

A task is one sidequest job (`RunTask`, its payload naming the task in `wrapped`, as Sidekiq
names an ActiveJob's class) on the queue `queue_name`, pushed with `result_ttl`, so the job's
status record (`sidequest.features.results`) says where it is and keeps its return value. Beside it,
in the same MULTI as the push, the task's own record (`keys.django_task`) keeps what Django's
`TaskResult` shows and the job does not: the task's path, its arguments, its times, every
attempt's worker and error (with the traceback). The worker updates it as the task runs; both
records expire `result_ttl` after their last change. With the client's `wait_replicas` (the
SIDEQUEST setting), an enqueue returns once that many replicas hold both, or raises
NotReplicatedError.

What Django's backend flags say here: `run_after` (supports_defer) is a scheduled push; async
tasks run (on the worker's event loop thread, through `Task.call`); results can be read from
any process; `priority` (-100..100, higher first) is sidequest's job priority (0..9, see
`level`): Django's default, 0, pushes a plain job, as does any priority near it (-10..10).

A worker runs only the tasks of modules it imported at start: each installed app's `tasks`
module (see `apps`), and any module the project's code or `-r` imports. A job naming any other
path goes to dead, and nothing is imported for it (`imported_task`): whoever can write to a
queue cannot make workers run a module's top-level code.

A failing task is FAILED: by default (`retry: 0`) its job goes straight to the dead set, where
the dashboard can retry it (the result is READY again, then counts a second attempt). The
enqueue does not wait for a transaction to commit, as Django's own backends; wrap it in
`transaction.on_commit` when the task reads rows the transaction writes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import redis
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from sidequest.client.sync_client import Client, default_client
from sidequest.contrib.django.compat import (
    SUCCEEDED,
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from sidequest.errors import SidequestError, UnknownJobError
from sidequest.features import lookup
from sidequest.jobs.definition import Job
from sidequest.jobs.options import check_options
from sidequest.store import keys, lanes

T = TypeVar("T")

RUN_TASK = "sidequest.contrib.django.RunTask"
DEFAULT_RESULT_TTL = 7 * 24 * 3600.0
STATUS = {"queued": TaskResultStatus.READY, "scheduled": TaskResultStatus.READY, "retry": TaskResultStatus.READY,
          "running": TaskResultStatus.RUNNING, "done": SUCCEEDED,
          "dead": TaskResultStatus.FAILED, "cancelled": TaskResultStatus.FAILED}
OPTIONS = ("result_ttl", "retry", "retry_queue", "backtrace", "dead", "timeout", "expires_in", "tags")


class TasksBackend(BaseTaskBackend):
    """Django's task backend on sidequest (see the module docstring). `OPTIONS` are job options
    given to every push: `result_ttl` (seconds a result is kept, 7 days), `retry` (0), and
    `retry_queue`, `backtrace`, `dead`, `timeout`, `expires_in`, `tags`."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                                       f"known: {', '.join(OPTIONS)}")
        try:
            self.job_options = check_options({"retry": 0, "result_ttl": DEFAULT_RESULT_TTL, **self.options})
        except SidequestError as exc:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']: {exc}") from None
        self.result_ttl = float(self.job_options["result_ttl"])
        self.client: Client | None = params.get("CLIENT")  # None: the default client, as SIDEQUEST sets it

    def _client(self) -> Client:
        return self.client if self.client is not None else default_client()

    def enqueue(self, task: Task[Any, T], args: Any, kwargs: Any) -> TaskResult[T]:
        """Push the task's job and its record in one MULTI; the result is READY."""
        self.validate_task(task)
        client = self._client()
        now = client.clock()
        at = None if task.run_after is None else task.run_after.timestamp()
        call = [task.module_path, list(args), dict(kwargs)]
        options = {**self.job_options, "queue": task.queue_name, "custom": {"wrapped": task.module_path}}
        if (chosen := level(task.priority)) is not None:
            options["priority"] = chosen
        entries, jids = client.build(RunTask, [call], [client.schedule_time(at, None, now)], now, options)
        jid = jids[0]
        if jid is None:
            raise SidequestError(f"client middleware stopped the push of task {task.module_path}")
        keep = int((self.result_ttl + max((at or now) - now, 0.0)) * 1000)
        record = {"task": task.module_path, "backend": self.alias, "queue_name": task.queue_name,
                  "run_after": "" if task.run_after is None else task.run_after.isoformat(),
                  "priority": str(task.priority),
                  "args": json.dumps(call[1]), "kwargs": json.dumps(call[2]), "enqueued_at": repr(now)}

        def also(pipe: Any) -> None:
            pipe.hset(keys.django_task(jid), mapping=record)
            pipe.pexpire(keys.django_task(jid), keep)

        replicas = client.replicas(RunTask, options)
        payload, when = entries[0]
        if when is None and lanes.route(payload, client.keys) is not None:
            # a job with a priority is pushed by a script, which takes no other commands: the
            # record goes first, so no worker runs the job without it (a failed push leaves a
            # record of an id no caller got, until it expires)
            client.write([], now, also=also, replicas=replicas)
            client.write(entries, now, replicas=replicas)
        else:
            client.write(entries, now, also=also, replicas=replicas)
        result = self._result(task, jid, TaskResultStatus.READY, record)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The result of task `result_id` from its records; TaskResultDoesNotExist when it has none."""
        client = self._client()
        record = read(client.redis, result_id) if result_id else {}
        if not record:
            raise TaskResultDoesNotExist(result_id)
        found = lookup.run(lookup.status_query(result_id, clock=client.clock, space=client.keys), client.redis)
        task = self._task(record)
        status = STATUS.get(found.state) or _settled(record)
        result = self._result(task, result_id, status, record)
        if status == SUCCEEDED and found.record is not None and "result" in found.record:
            object.__setattr__(result, "_return_value", json.loads(found.record["result"]))
        return result

    def _task(self, record: dict[str, str]) -> Task[Any, Any]:
        """The task a record names, with the queue and time it was enqueued with."""
        try:
            task = imported_task(record["task"])
        except UnknownJobError as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        run_after = record.get("run_after", "")
        return task.using(queue_name=record["queue_name"], backend=record["backend"],
                          priority=int(record.get("priority") or 0),
                          run_after=datetime.fromisoformat(run_after) if run_after else None)

    def _result(self, task: Task[Any, T], jid: str, status: TaskResultStatus,
                record: dict[str, str]) -> TaskResult[T]:
        def when(name: str) -> datetime | None:
            raw = record.get(name)
            return _datetime(float(raw)) if raw else None

        return TaskResult(task=task, id=jid, status=status, enqueued_at=when("enqueued_at"),
                          started_at=when("started_at"), finished_at=when("finished_at"),
                          last_attempted_at=when("last_attempted_at"),
                          args=json.loads(record.get("args", "[]")), kwargs=json.loads(record.get("kwargs", "{}")),
                          backend=self.alias, errors=[TaskError(**e) for e in json.loads(record.get("errors", "[]"))],
                          worker_ids=json.loads(record.get("worker_ids", "[]")))

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        if "sidequest.contrib.django" not in settings.INSTALLED_APPS:
            yield checks.Error(f"TASKS[{self.alias!r}] uses sidequest, whose Django app is not installed",
                               hint="add 'sidequest.contrib.django' to INSTALLED_APPS: it configures the "
                                    "client from SIDEQUEST and registers the job that runs tasks in workers",
                               id="sidequest.E001")


def level(priority: int) -> int | None:
    """Django's priority (-100..100, 0 by default, higher first) as sidequest's (0..9, 9 first):
    5 + priority / 20, rounded, so -100 is 0 and 100 is 9. None for the middle level, 5 (Django's
    default and -10..10): a plain job, without the field, which stays in Sidekiq's layout and runs
    before the laned jobs of levels up to 5 that wait behind it (docs/flow-control.md, Priorities)."""
    found = max(0, min(9, lanes.DEFAULT_LEVEL + round(priority * 5 / 100)))
    return None if found == lanes.DEFAULT_LEVEL else found


def imported_task(path: str) -> Task[Any, Any]:
    """The task at `path` (its `module_path`), if its module is one this process has imported:
    an installed app's `tasks` module (imported when Django is ready, see `apps`), or one the
    project's code or the worker's `-r` imported. Never an import: a payload or a record in Redis
    names the path, and anyone who can write to a queue could name any module (its top-level
    code would run in every worker), so a path is only looked up, and must lead to a Task."""
    module, _, name = path.rpartition(".")
    found = getattr(sys.modules.get(module), name, None) if module and name else None
    if not isinstance(found, Task):
        raise UnknownJobError(f"{path!r} is not a task this worker imported; tasks run from an installed app's "
                              "tasks.py or a module the worker imports (-r), never from a module a job names")
    return found


def read(client: redis.Redis, jid: str) -> dict[str, str]:
    """The record of task `jid`, decoded (empty when there is none)."""
    stored = client.hgetall(keys.django_task(jid))  # bytes: sidequest's clients never decode replies
    return {_text(k): _text(v) for k, v in stored.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _datetime(epoch: float) -> datetime:
    """Epoch seconds as Django would write the time now: aware in UTC, or naive local without USE_TZ."""
    moment = datetime.fromtimestamp(epoch, tz=UTC)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def _settled(record: dict[str, str]) -> TaskResultStatus:
    """The status from the task's own record, when the job's status record is gone."""
    if not record.get("finished_at"):
        return TaskResultStatus.READY
    return TaskResultStatus.FAILED if json.loads(record.get("errors", "[]")) else SUCCEEDED


class TaskFailed(Exception):
    """A task ended with a BaseException that is not an Exception (SystemExit, ...): the job fails with this."""


class RunTask(Job, name=RUN_TASK, retry=0):
    """The job that runs one Django task in a worker, keeping its record (see the module docstring)."""

    def perform(self, path: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return Attempt(self.jid, float(self.payload.get("result_ttl") or DEFAULT_RESULT_TTL)).run(path, args, kwargs)


class Attempt:
    """One run of a task: its record's times, worker and error, and Django's task signals."""

    def __init__(self, jid: str, ttl: float) -> None:
        self.jid = jid
        self.ttl_ms = int(ttl * 1000)
        self.redis = default_client().redis
        self.key = keys.django_task(jid)

    def run(self, path: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        task = imported_task(path)  # first: a path no task of this process has is refused, unimported
        record = read(self.redis, self.jid)
        alias = record.get("backend", "default")
        backend = task_backends[alias]
        if not isinstance(backend, TasksBackend):
            raise ImproperlyConfigured(f"task {path} names TASKS[{alias!r}], which is not sidequest's backend here")
        now = repr(time.time())
        workers = [*json.loads(record.get("worker_ids", "[]")), f"{socket.gethostname()}:{os.getpid()}"]
        self._write({"last_attempted_at": now, "worker_ids": json.dumps(workers)}, first={"started_at": now})
        record = read(self.redis, self.jid)
        task = backend._task(record) if record.get("task") else task
        result = backend._result(task, self.jid, TaskResultStatus.RUNNING, record)
        task_started.send(type(backend), task_result=result)
        try:
            call_args = [TaskContext(task_result=result), *args] if task.takes_context else args
            value = json.loads(json.dumps(task.call(*call_args, **kwargs), allow_nan=False))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self._failed(backend, result, exc)
            if isinstance(exc, Exception):
                raise
            raise TaskFailed(f"{type(exc).__name__}: {exc}") from exc
        self._write({"finished_at": repr(time.time())})
        object.__setattr__(result, "status", SUCCEEDED)
        object.__setattr__(result, "_return_value", value)
        task_finished.send(type(backend), task_result=result)
        return value

    def _failed(self, backend: TasksBackend, result: TaskResult[Any], exc: BaseException) -> None:
        error = TaskError(exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                          traceback="".join(traceback.format_exception(exc)))
        result.errors.append(error)
        errors = [{"exception_class_path": e.exception_class_path, "traceback": e.traceback} for e in result.errors]
        self._write({"finished_at": repr(time.time()), "errors": json.dumps(errors)})
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        task_finished.send(type(backend), task_result=result)

    def _write(self, fields: dict[str, str], first: dict[str, str] | None = None) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.key, mapping=cast(Any, fields))
        for name, value in (first or {}).items():
            pipe.hsetnx(self.key, name, value)
        pipe.pexpire(self.key, self.ttl_ms)
        pipe.execute()
