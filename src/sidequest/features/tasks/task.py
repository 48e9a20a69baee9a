"""A task's handle: open one, add jobs to it, seal it, and read its status and events.

    task = Task.create("sign up 200 products", meta={"seller": 42}, on_complete=notify)
    jids = task.add_bulk(signup, [[p] for p in product_ids])
    task.seal()                                  # no more jobs: completion may now fire
    Task.find(task.id).status()                  # {"counts": {...}, "percent": 37.5, "done": False, ...}
    Task.find(task.id).events(status="failed")   # why the failed ones failed

Creating a task writes its hash and its place in the recent tasks index; adding jobs pushes them
with their `enqueued` events in the same transaction; sealing runs `TASK_SEAL` (see `lua`). What
happens to each job afterwards is recorded by the worker (see `feature`).

Every key of a task expires: `ttl` (the `task_ttl` setting, 7 days by default) after its last
change while it runs, so a task that is never sealed, or whose jobs never all end, goes away by
itself; `retention` after it completes. Adding a job scheduled further ahead makes room for it.

In Cluster mode a task lives in one slot, beside its jobs, so every change to it is still part
of its job's atomic move: `Task.create(..., queue="reports")` (default `default`) gives it an
id that begins with the queue's hash tag (`{reports}3f9c...`), and its jobs and callbacks must be
in that queue, or, for a queue of a group (`{media}resize`), in any queue of the group (another
is refused in one line).
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Iterable
from typing import Any, cast

import redis

from sidequest.client.sync_client import Client, default_client
from sidequest.errors import JobArgumentError
from sidequest.features.recent import newest, remember
from sidequest.features.tasks.lua import TASK_SEAL, cluster_lua
from sidequest.jobs.definition import JobSetter
from sidequest.jobs.options import check_options, merge_options
from sidequest.jobs.payload import encode
from sidequest.store import keys

RETENTION = 7 * 24 * 3600.0
TTL = 7 * 24 * 3600.0  # an unfinished task's lifetime after its last change (`task_ttl`)
FINAL = ("finished", "failed", "error")
# The recent tasks index (`keys.TASKS_RECENT`) keeps at most this many, none older than this:
# each task's creation trims it, so it never grows past the bound whatever the workload.
RECENT_LIMIT = 10_000
RECENT_AGE = RETENTION


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
               ttl: float | None = None, queue: str | None = None) -> Task:
        """Open a new task. Callbacks are jobs, enqueued with args `[task_id]` when it completes.
        Its records expire `ttl` s (default: the client's `task_ttl`) after its last change, and
        `retention` s after it completes. `queue` places it in Cluster mode (see module)."""
        chosen = client or default_client()
        tag = ""
        if chosen.keys.cluster:
            problem = keys.cluster_queue_problem(queue or "default")
            if problem is not None:
                raise JobArgumentError(f"{problem}; rename the queue")
            tag = "{" + keys.group_of(queue or "default") + "}"
        task = cls(tag + secrets.token_hex(12), chosen, retention, ttl)
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
                    task.check_queue(payload)
                    fields[field] = encode(payload)[:-1]  # the script appends enqueued_at and "}"
                    fields[f"{field}:queue"] = payload["queue"]
        if tag:  # its queue is listed from now on: a callback pushed by a script does not add it
            task.redis.sadd(keys.QUEUES, queue or "default")
        # one round trip: the task and its place in the index (in two slots on a Cluster)
        pipe = task.redis.pipeline(transaction=not tag)
        pipe.hset(keys.task(task.id), mapping=fields)  # type: ignore[arg-type]  # redis-py: invariant key type
        pipe.expire(keys.task(task.id), expire_seconds(task.ttl))
        remember(pipe, keys.TASKS_RECENT, task.id, now, RECENT_AGE, RECENT_LIMIT)
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
        entries, jids = self.client.build(target, args_list, times, now, options, {"task_id": self.id})
        if not entries:
            return jids
        for payload, _ in entries:
            self.check_queue(payload)
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
                pipe.expire(key, max(expire_seconds(ttl), left))

        self.client.write(entries, now, also=record, replicas=self.client.replicas(target, options))
        return jids

    def check_queue(self, payload: dict[str, Any]) -> None:
        """In Cluster mode, refuse a job or callback outside the task's queue (see module)."""
        group = self.id[1:self.id.find("}")] if self.id.startswith("{") else None
        if group is not None and keys.group_of(str(payload["queue"])) != group:
            raise JobArgumentError(
                f"task {self.id} lives in the slot of queue {group!r} and its group {{{group}}} (Cluster mode keeps "
                f"a task beside its jobs); job {payload['class']!r} is for queue {payload['queue']!r}: create the "
                f"task with queue={payload['queue']!r}, or push the job to a queue of that slot")

    def seal(self) -> None:
        """No more jobs will be added; the task completes when every job has reached an end."""
        seal = self.redis.register_script(cluster_lua(TASK_SEAL) if self.client.keys.cluster else TASK_SEAL)
        args = [self.client.clock(), int(self.retention), expire_seconds(self.ttl)]
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
        return newest((client or default_client()).redis, keys.TASKS_RECENT, keys.task, _status, offset, limit)

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


def expire_seconds(ttl: float) -> int:
    """A TTL for EXPIRE: whole seconds, at least one (EXPIRE 0 would delete the key)."""
    return max(1, math.ceil(ttl))
