"""`api.Load`: per queue and capsule, the jobs running and the slots that fetch from it, from the
process hashes as sidequest, Sidekiq 7 and Sidekiq 6 write them (written here as they would be):
a quiet process's slots are not capacity, a process whose heartbeat expired counts for nothing,
and a Sidekiq 6 process's `<identity>:workers` is read where it wrote no `work`."""

from __future__ import annotations

import json
import time

from sidequest.api import CapsuleLoad, Load, QueueLoad


def beat(r, identity: str, info: dict, busy: int, quiet: bool = False, work: list[str] = (),
         work_key: str = "work") -> None:
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps(info), "busy": busy, "beat": time.time(),
                              "quiet": "true" if quiet else "false"})
    for n, queue in enumerate(work):
        r.hset(f"{identity}:{work_key}", f"t{n}", json.dumps({"queue": queue, "payload": "{}", "run_at": 1}))


def capsules(**given: tuple[int, list[str]]) -> dict:
    return {name: {"concurrency": n, "mode": "strict", "weights": dict.fromkeys(queues, 0)}
            for name, (n, queues) in given.items()}


def test_busy_and_capacity_per_queue_and_capsule(client, r):
    r.sadd("queues", "default", "mail", "ledger", "idle")
    beat(r, "a:1:x", {"concurrency": 12, "capsules": capsules(default=(10, ["default", "mail"]),
                                                              serial=(2, ["ledger"]))},
         busy=3, work=["default", "mail", "ledger"])
    beat(r, "b:2:y", {"concurrency": 12, "capsules": capsules(default=(10, ["default", "mail"]),
                                                              serial=(2, ["ledger"]))},
         busy=1, quiet=True, work=["default"])  # quiet: its job runs on, it fetches no more
    beat(r, "ruby6:3:z", {"concurrency": 5, "queues": ["mail", "legacy"]}, busy=2,
         work=["legacy", "legacy"], work_key="workers")  # Sidekiq 6: no capsules, `workers`
    r.sadd("processes", "gone:4:w")  # its heartbeat expired; its leftovers count for nothing
    r.hset("gone:4:w:work", "t0", json.dumps({"queue": "default", "payload": "{}", "run_at": 1}))

    load = Load(client)
    assert load.queues == {"default": QueueLoad(busy=2, capacity=10), "mail": QueueLoad(busy=1, capacity=15),
                           "ledger": QueueLoad(busy=1, capacity=2), "legacy": QueueLoad(busy=2, capacity=5),
                           "idle": QueueLoad(busy=0, capacity=0)}
    assert load.capsules == {"default": CapsuleLoad(capacity=15, busy={"default": 2, "mail": 1, "legacy": 2}),
                             "serial": CapsuleLoad(capacity=2, busy={"ledger": 1})}
    assert load.concurrency == 29  # every process's threads, as sidequest_concurrency always showed
