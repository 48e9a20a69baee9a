"""How an operator's action moves a stored job: the exact entry, one atomic script, the lifecycle.

Every action names the entry by its exact bytes, as stored, and the script moves it only if
those bytes are still where they were read (`scripts.ADMIN_*`). Two operators clicking at once
on one entry therefore get one move between them; the other gets False and nothing is written.
The lifecycle's operations for the point (`requeued`, `deleted`, `killed`: tasks record them on
the job's event) run inside the same call, and only when the move happened.

Payload rewriting (a retry's `retry_count`, a fresh `enqueued_at`) is done here in Python, as
the poller and the retrier do, so the scripts only move bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from redis.commands.core import Script

from .. import keys
from ..admin_lifecycle import operator_lifecycle
from ..client import Client
from ..errors import PayloadError
from ..payload import encode, in_millis, stamp
from ..scripts import ADMIN_DELETE, ADMIN_FORGET_QUEUE, ADMIN_KILL, ADMIN_REQUEUE, core_lib

# (script, keys, args): one atomic call, run alone (`one`) or with others in a pipeline (`many`)
Call = tuple[Script, list[str], list[Any]]


class Actions:
    """The admin scripts on one client, with the task, unique and status features at the admin points.

    The worker-only per-job metrics feature is left out: an operator's action is not a run.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.redis = client.redis
        self.lifecycle = operator_lifecycle(client)
        lib = core_lib(self.lifecycle.lua)
        self._requeue = self.redis.register_script(lib + ADMIN_REQUEUE)
        self._kill = self.redis.register_script(lib + ADMIN_KILL)
        self._delete = self.redis.register_script(lib + ADMIN_DELETE)
        self._forget = self.redis.register_script(ADMIN_FORGET_QUEUE)

    # -- building calls ----------------------------------------------------------------------
    def requeue(self, source: str, value: bytes, payload: dict[str, Any] | None, *, retry: bool) -> Call:
        """Move an entry of `source` (a sorted set) onto its job's queue.

        With `retry`, `retry_count` goes down by one first, as Sidekiq's `SortedEntry#retry` does,
        so a manual retry does not count against the job's retries. Raises PayloadError for an
        entry that is not a job (it has no queue to go to: delete or kill it instead).
        """
        if payload is None:
            raise PayloadError("this entry is not a job, so it cannot be queued; delete or kill it")
        job = dict(payload)
        count = job.get("retry_count")
        if retry and isinstance(count, int) and not isinstance(count, bool):
            job["retry_count"] = count - 1
        job.pop("at", None)  # a scheduled time has no meaning in a queue
        now = self.client.clock()
        job["enqueued_at"] = stamp(now, self.client.config.sidekiq_version >= 8 or in_millis(job))
        queue = job.get("queue")
        if not isinstance(queue, str) or not queue:
            queue = job["queue"] = "default"
        try:
            blob = encode(job).encode("utf-8")
        except (ValueError, TypeError, UnicodeEncodeError) as exc:
            raise PayloadError(f"this entry cannot be written back as JSON ({exc}); delete or kill it") from None
        ops = self.lifecycle.ops("requeued", job)
        return self._requeue, [source, keys.queue(queue), keys.QUEUES], [value, blob, queue, now, "requeued", *ops]

    def kill(self, source: str, value: bytes, payload: dict[str, Any] | None) -> Call:
        """Move an entry of `source` (a sorted set), unchanged, to `dead`, trimmed as a death is."""
        now = self.client.clock()
        config = self.client.config
        ops = self.lifecycle.ops("killed", payload)
        return self._kill, [source, keys.DEAD], [value, now, now - config.dead_timeout, config.dead_max_jobs,
                                                 now, "killed", *ops]

    def delete(self, source: str, value: bytes, payload: dict[str, Any] | None, where: str = "zset") -> Call:
        """Remove an entry: from a sorted set (`where="zset"`), or one copy from a list
        (`where` is LREM's count: "1" nearest the head, "-1" nearest the tail)."""
        ops = self.lifecycle.ops("deleted", payload)
        return self._delete, [source], [value, where, self.client.clock(), "deleted", *ops]

    # -- running them ------------------------------------------------------------------------
    def one(self, call: Call) -> bool:
        """Run one call; True if this call moved the entry."""
        script, call_keys, args = call
        return int(cast("int", script(keys=call_keys, args=args))) == 1

    def many(self, calls: Sequence[Call]) -> list[bool]:
        """Run calls in one round trip, each still its own atomic move; whether each moved."""
        if not calls:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for script, call_keys, args in calls:
            script(keys=call_keys, args=args, client=pipe)
        return [int(result) == 1 for result in pipe.execute()]

    def forget_queue(self, name: str) -> bool:
        """Drop `name` from `queues` if its list is empty (a job pushed meanwhile keeps it)."""
        result = self._forget(keys=[keys.queue(name), keys.QUEUES], args=[name])
        return int(cast("int", result)) == 1
