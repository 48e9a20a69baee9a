"""How loaded each queue and capsule is: the jobs running now and the slots that fetch from it,
over every live process (the signals an autoscaler reads beside a queue's size and latency).

    load = Load()
    load.queues["mail"].busy, load.queues["mail"].capacity     # jobs running from mail, slots on mail
    load.capsules["serial"].capacity, load.capsules["serial"].busy   # {"ledger": 1}
    load.concurrency                                           # slots of every process

Busy counts the `<identity>:work` hash every process rewrites at each heartbeat (a job's queue
is in its entry), so it is as fresh as the last beats, as `Stats().workers_size` is. Capacity
counts the capsules in each process's info (Sidekiq 7's `capsules`; a Sidekiq 6 process is one
capsule of its queues): a queue's capacity is the slots of every capsule that fetches from it,
so a capsule of 10 threads over two queues gives each 10. A quiet or stopping process fetches
nothing: its running jobs count in busy, its slots not in capacity. Capsules are summed by name
over the processes. A running job counts in the capsule of its process that lists its queue.

Two round trips: the process set, then each process's hash and work (a third only while a Sidekiq
6 process, which writes `<identity>:workers` instead, is busy).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from sidequest.api.processes import FIELDS, Process, _process
from sidequest.client.sync_client import Client, default_client
from sidequest.store import keys


@dataclass
class QueueLoad:
    """One queue's load."""

    busy: int = 0  # jobs from it running now, over every process
    capacity: int = 0  # slots of live processes (not quiet) that fetch from it


@dataclass
class CapsuleLoad:
    """One capsule's load, over every process that has a capsule of that name."""

    capacity: int = 0  # its slots in live processes (not quiet)
    busy: dict[str, int] = field(default_factory=dict)  # queue -> its jobs running now


class Load:
    """A snapshot of every queue's and capsule's busy slots and capacity, read when built.
    Queues in `queues` (every queue with jobs pushed) are there with zeros when idle."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or default_client()
        redis = self.client.redis
        identities = sorted(m.decode("utf-8", "replace")
                            for m in cast("set[bytes]", redis.smembers(keys.PROCESSES)))
        pipe = redis.pipeline(transaction=False)
        pipe.smembers(keys.QUEUES)
        for identity in identities:
            pipe.hmget(keys.process(identity), list(FIELDS))
            pipe.hvals(keys.work(identity))
        known, *found = pipe.execute()
        processes: list[tuple[Process, list[bytes]]] = []
        for index, identity in enumerate(identities):
            process = _process(identity, found[2 * index], self.client)
            if process is not None:  # its heartbeat expired: its work hash did too
                processes.append((process, found[2 * index + 1]))
        self._sidekiq6_work(processes)
        self.queues: dict[str, QueueLoad] = {q.decode("utf-8", "replace"): QueueLoad() for q in known}
        self.capsules: dict[str, CapsuleLoad] = {}
        self.concurrency = sum(process.concurrency for process, _ in processes)
        for process, work in processes:
            self._add(process, work)

    def _sidekiq6_work(self, processes: list[tuple[Process, list[bytes]]]) -> None:
        """Sidekiq 6 lists its running jobs in `<identity>:workers`: read it for the busy
        processes that wrote no `work` (sidequest writes both)."""
        missing = [i for i, (process, work) in enumerate(processes) if not work and process.busy]
        if not missing:
            return
        pipe = self.client.redis.pipeline(transaction=False)
        for i in missing:
            pipe.hvals(keys.workers(processes[i][0].identity))
        for i, work in zip(missing, pipe.execute(), strict=True):
            processes[i] = (processes[i][0], work)

    def _add(self, process: Process, work: Iterable[bytes]) -> None:
        owner: dict[str, str] = {}  # queue -> the first of the process's capsules that fetches from it
        for name, capsule in process.capsules.items():
            load = self.capsules.setdefault(name, CapsuleLoad())
            for queue in capsule["weights"]:
                owner.setdefault(queue, name)
                if not process.stopping:
                    self.queues.setdefault(queue, QueueLoad()).capacity += capsule["concurrency"]
            if not process.stopping:
                load.capacity += capsule["concurrency"]
        fallback = next(iter(process.capsules), "default")
        for raw in work:
            running = _queue_of(raw)
            if running is None:
                continue
            self.queues.setdefault(running, QueueLoad()).busy += 1
            busy = self.capsules.setdefault(owner.get(running, fallback), CapsuleLoad()).busy
            busy[running] = busy.get(running, 0) + 1


def _queue_of(raw: bytes) -> str | None:
    """The queue of one `work` entry (`{"queue": ..., "payload": ..., "run_at": ...}`)."""
    try:
        entry: Any = json.loads(raw)
    except ValueError:
        return None
    queue = entry.get("queue") if isinstance(entry, dict) else None
    return str(queue) if queue else None
