"""Putting back the jobs of worker processes that died (reliable fetch).

A reserved list `sidequest:reserved:<identity>` whose owner's heartbeat hash `<identity>` has
expired belongs to a dead process. Any live process moves its jobs back to the head of their
queues, one Lua call per job that checks the owner is still silent and that the job is still
reserved, so two recovering processes cannot both move a job, and a process that was only
paused (SIGSTOP) and beats again keeps its work. Each recovery adds one to `recovery_count` in
the payload; past `max_recoveries` the job goes to `dead` with error_class
`sidequest.RecoveryLimitExceeded`, so a job that crashes its process cannot crash workers forever.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from . import keys
from .config import Config
from .errors import PayloadError
from .payload import decode, encode
from .scripts import Scripts

if TYPE_CHECKING:
    from .tasks import TaskRecorder

log = logging.getLogger(__name__)

LIMIT_ERROR = "sidequest.RecoveryLimitExceeded"


class Recovery:
    def __init__(self, config: Config, client: redis.Redis, identity: str,
                 clock: Callable[[], float] = time.time, tasks: TaskRecorder | None = None) -> None:
        self.tasks = tasks
        self.config = config
        self.redis = client
        self.identity = identity
        self.scripts = Scripts(client)
        self.clock = clock

    def run(self) -> int:
        """Recover every orphaned job now; return how many were moved."""
        lock_ttl = max(int(self.config.recovery_interval * 1000), 1000)
        if not self.redis.set(keys.RECOVERY_LOCK, self.identity, nx=True, px=lock_ttl):
            return 0  # another process is at it; the scripts would make us no-ops anyway
        moved = 0
        try:
            self._prune_processes()
            for raw_key in self.redis.scan_iter(match=keys.reserved_pattern(), count=200):
                key = raw_key.decode()
                owner = keys.identity_of_reserved(key)
                if owner == self.identity or self.redis.exists(keys.process(owner)):
                    continue
                for raw in self.redis.lrange(key, 0, -1):
                    moved += self._recover(key, owner, raw)
        finally:
            self.redis.delete(keys.RECOVERY_LOCK)
        return moved

    def _prune_processes(self) -> None:
        """Drop identities whose heartbeat expired from `processes` (Sidekiq's ProcessSet.cleanup)."""
        members = list(self.redis.smembers(keys.PROCESSES))
        if not members:
            return
        pipe = self.redis.pipeline(transaction=False)
        for member in members:
            pipe.exists(keys.process(member.decode()))
        gone = [m for m, alive in zip(members, pipe.execute(), strict=True) if not alive]
        if gone:
            self.redis.srem(keys.PROCESSES, *gone)

    def _recover(self, key: str, owner: str, raw: bytes) -> int:
        now = self.clock()
        try:
            payload: dict[str, Any] | None = decode(raw)
        except PayloadError:
            payload = None
            mode, queue, blob = "dead", "", raw  # not a job: the dead set, unchanged
        else:
            count = payload.get("recovery_count", 0)
            count = (count if isinstance(count, int) else 0) + 1
            payload["recovery_count"] = count
            queue = payload.get("queue") if isinstance(payload.get("queue"), str) else "default"
            if count > self.config.max_recoveries:
                payload.update(error_class=LIMIT_ERROR, failed_at=now, error_message=(
                    f"the worker running this job died {count} times (limit {self.config.max_recoveries});"
                    " the job may be what kills it"))
                mode = "dead"
            else:
                mode = "queue"
            blob = encode(payload).encode("utf-8")
        dest = keys.queue(str(queue)) if mode == "queue" else keys.DEAD
        result = int(self.scripts.recover(keys=[key, keys.process(owner), dest, keys.QUEUES],
                                          args=[raw, blob, mode, queue, now]))
        if result == 1 and self.tasks is not None and payload is not None:
            if mode == "queue":
                self.tasks.transition(payload, None, "enqueued", "error: its worker process died; recovered")
            else:
                self.tasks.transition(payload, None, "error", str(payload["error_message"]),
                                      error_class=LIMIT_ERROR, error_message=payload["error_message"],
                                      finished_at=now)
        if result == 1:
            log.warning("recovered job from dead process %s into %s", owner,
                        f"queue {queue!r}" if mode == "queue" else "the dead set (recovery limit)")
        return max(result, 0)
