"""How an operator's action moves a stored job: the exact entry, one atomic script, the lifecycle.

Every action names the entry by its exact bytes, as stored, and the script moves it only if
those bytes are still where they were read (`scripts.ADMIN_*`). Two operators clicking at once
on one entry therefore get one move between them; the other gets False and nothing is written.
The lifecycle's operations for the point (`requeued`, `deleted`, `killed`: tasks record them on
the job's event) run inside the same call, and only when the move happened.

Payload rewriting (a retry's `retry_count`, a fresh `enqueued_at`) is done here in Python, as
the poller and the retrier do, so the scripts only move bytes.

In Cluster mode (see `keys.ClusterKeyspace`) an entry of `retry:{q}` (or `schedule:{q}`,
`dead:{q}`) goes back to `queue:{q}` or to `dead:{q}`: every move stays in its queue's slot. The
queue's name is added to `queues` (another slot) just before, as a push adds it; a batch of
moves is sent as one pipeline per primary (redis-py's cluster pipeline refuses scripts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, cast

from redis.commands.core import Script
from redis.exceptions import AskError, ClusterDownError, TryAgainError

from sidequest.client.sync_client import Client
from sidequest.errors import PayloadError
from sidequest.jobs.payload import encode, in_millis, stamp
from sidequest.store import faults, keys, lanes
from sidequest.store.scripts import ADMIN_DELETE, ADMIN_FORGET_QUEUE, ADMIN_KILL, ADMIN_REQUEUE, core_lib
from sidequest.worker.lifecycle import operator_lifecycle

# redis-py's answers when a slot moved (or is moving) between reading the slot map and the call:
# a call that got one ran nowhere, so it is sent again through the cluster client, which follows
REROUTE = (AskError, TryAgainError, ClusterDownError)  # AskError covers MovedError


class Call(NamedTuple):
    """One atomic call, run alone (`Actions.one`) or with others in a pipeline (`Actions.many`)."""

    script: Script
    keys: list[str]
    args: list[Any]
    listed: str | None = None  # Cluster mode: the queue to add to `queues` first (another slot)


class Actions:
    """The admin scripts on one client, with the registered features that record where a job is
    at the admin points (`lifecycle.operator_lifecycle`).

    The worker-only per-job metrics feature is left out: an operator's action is not a run.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.redis = client.redis
        self.space = client.keys
        self.lifecycle = operator_lifecycle(client)
        lib = core_lib(self.lifecycle.lua, self.space.cluster)
        self._requeue = self.redis.register_script(lib + ADMIN_REQUEUE)
        self._kill = self.redis.register_script(lib + ADMIN_KILL)
        self._delete = self.redis.register_script(lib + ADMIN_DELETE)
        self._forget = self.redis.register_script(ADMIN_FORGET_QUEUE)

    # -- building calls ----------------------------------------------------------------------
    def requeue(self, source: str, value: bytes, payload: dict[str, Any] | None, *, retry: bool,
                home: str | None = None) -> Call:
        """Move an entry of `source` (a sorted set) onto its job's queue (in Cluster mode, onto
        `home`: the queue whose set `source` is).

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
            queue = job["queue"] = home or "default"
        try:
            blob = encode(job).encode("utf-8")
        except (ValueError, TypeError, UnicodeEncodeError) as exc:
            raise PayloadError(f"this entry cannot be written back as JSON ({exc}); delete or kill it") from None
        ops = self.lifecycle.ops("requeued", job)
        if self.space.cluster:  # into the queue of the set it is in: the same slot
            queue = home or queue
        lane = lanes.route(job, self.space, queue) or lanes.NO_LANE
        if self.space.cluster:
            return Call(self._requeue, [source, self.space.queue(queue)],
                        [value, blob, queue, now, "requeued", *lane, *ops], listed=queue)
        return Call(self._requeue, [source, keys.queue(queue), keys.QUEUES],
                    [value, blob, queue, now, "requeued", *lane, *ops])

    def kill(self, source: str, value: bytes, payload: dict[str, Any] | None, home: str | None = None) -> Call:
        """Move an entry of `source` (a sorted set), unchanged, to the dead set, trimmed as a death is."""
        now = self.client.clock()
        config = self.client.config
        ops = self.lifecycle.ops("killed", payload)
        return Call(self._kill, [source, self.dead_key(home, payload)],
                    [value, now, now - config.dead_timeout, config.dead_max_jobs, now, "killed", *ops])

    def dead_key(self, home: str | None, payload: dict[str, Any] | None) -> str:
        """Where a kill puts an entry: `dead`, or in Cluster mode the dead set of its queue `home`."""
        if not self.space.cluster:
            return keys.DEAD
        stated = (payload or {}).get("queue")
        return self.space.dead(home or (stated if isinstance(stated, str) and stated else "default"))

    def delete(self, source: str, value: bytes, payload: dict[str, Any] | None, where: str = "zset") -> Call:
        """Remove an entry: from a sorted set (`where="zset"`), or one copy from a list
        (`where` is LREM's count: "1" nearest the head, "-1" nearest the tail)."""
        ops = self.lifecycle.ops("deleted", payload)
        return Call(self._delete, [source], [value, where, self.client.clock(), "deleted", *ops])

    # -- running them ------------------------------------------------------------------------
    def one(self, call: Call) -> bool:
        """Run one call; True if this call moved the entry."""
        if call.listed is not None:
            self.redis.sadd(keys.QUEUES, call.listed)
        return int(faults.settled(call.script(keys=call.keys, args=call.args), call.args[0])) == 1

    def many(self, calls: Sequence[Call]) -> list[bool]:
        """Run calls in one round trip (in Cluster mode, one per primary), each still its own
        atomic move; whether each moved."""
        if not calls:
            return []
        if self.space.cluster:
            return self._many_per_node(calls)
        pipe = self.redis.pipeline(transaction=False)
        for script, call_keys, args, _ in calls:
            script(keys=call_keys, args=args, client=pipe)
        results = pipe.execute()
        return [int(faults.settled(result, call.args[0])) == 1 for call, result in zip(calls, results, strict=True)]

    def _many_per_node(self, calls: Sequence[Call]) -> list[bool]:
        """Cluster mode: a plain pipeline on each primary holding some of the calls' slots (it
        loads the scripts there); a call whose slot moved meanwhile is sent again alone."""
        listed = sorted({call.listed for call in calls if call.listed is not None})
        if listed:
            self.redis.sadd(keys.QUEUES, *listed)
        cluster: Any = self.redis
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for index, call in enumerate(calls):
            node = cluster.get_node_from_key(call.keys[0])
            by_node.setdefault(node.name, (node, []))[1].append(index)
        results: list[Any] = [None] * len(calls)
        for node, indexes in by_node.values():
            pipe = cluster.get_redis_connection(node).pipeline(transaction=False)
            for index in indexes:
                calls[index].script(keys=calls[index].keys, args=calls[index].args, client=pipe)
            for index, result in zip(indexes, pipe.execute(raise_on_error=False), strict=True):
                if isinstance(result, REROUTE):
                    result = calls[index].script(keys=calls[index].keys, args=calls[index].args)
                elif isinstance(result, Exception):
                    raise result
                results[index] = result
        return [int(faults.settled(result, call.args[0])) == 1 for call, result in zip(calls, results, strict=True)]

    def forget_queue(self, name: str) -> bool:
        """Drop `name` from `queues` if its list is empty (a job pushed meanwhile keeps it)."""
        if self.space.cluster:
            return self._forget_in_cluster(name)
        result = self._forget(keys=[keys.queue(name), keys.QUEUES], args=[name])
        return int(cast("int", result)) == 1

    def _forget_in_cluster(self, name: str) -> bool:
        """Cluster mode: `queues` is in another slot than the queue, so this takes two steps:
        look (the queue's list, and its schedule, retry and dead sets, which the poller and the
        admin API find through `queues`), then SREM. A push adds the name before it writes its
        job, so a job found on a second look puts the name back; only a push whose two steps
        straddle both looks can leave its queue unlisted until its next push."""
        if not self._empty(name):
            return False
        if not self.redis.srem(keys.QUEUES, name):
            return False
        if not self._empty(name):
            self.redis.sadd(keys.QUEUES, name)
            return False
        return True

    def _empty(self, name: str) -> bool:
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(self.space.queue(name))
        for sorted_set in (self.space.schedule, self.space.retry, self.space.dead):
            pipe.zcard(sorted_set(name))
        return not any(pipe.execute())
