"""A queue's lanes written as the core's scripts leave them (API31.md's key layout), so a test of
what the admin API, the dashboard or the CLI reads knows each number exactly."""

from __future__ import annotations

import json

from sidequest import Client


class LaneState:
    """Writes a queue's lanes as the core's scripts keep them (`sidequest:lanes:<q>`, or the
    queue's hash tag in Cluster mode)."""

    def __init__(self, client: Client, queue: str) -> None:
        self.redis = client.redis
        self.queue = queue
        self.base = f"sidequest:lanes:{{{queue}}}" if client.keys.cluster else f"sidequest:lanes:{queue}"
        self.count = 0

    def waiting(self, group: str, n: int, level: int = 5) -> None:
        rotation, lane = f"{self.base}:{level}", f"{self.base}:{level}:{group}"
        self.redis.sadd(self.base, str(level))
        if group.encode() not in self.redis.lrange(rotation, 0, -1):
            self.redis.rpush(rotation, group)
        for _ in range(n):
            self.count += 1
            payload = {"class": "Echo", "args": [self.count], "queue": self.queue, "jid": f"{self.count:024x}",
                       "group": group, "priority": level}
            self.redis.lpush(lane, json.dumps(payload))
        self.redis.hincrby(f"{self.base}:waiting", group, n)

    def running(self, group: str, n: int) -> None:
        self.redis.sadd(f"{self.base}:busy", group)
        self.redis.sadd(f"{self.base}:running:{group}", *(f"run-{group}-{i}" for i in range(n)))

    def limits(self, group: str, concurrency: int = 0, count: int = 0, period_ms: int = 0) -> None:
        self.redis.hset(f"{self.base}:limits", group, f"{concurrency} {count} {period_ms}")
        if count:
            self.redis.set(f"{self.base}:rate:{group}", 1, px=period_ms)

    def keys(self) -> list[str]:
        found = [k.decode() for k in self.redis.scan_iter(match=f"{self.base}:*", count=1000)]
        return sorted(found + ([self.base] if self.redis.exists(self.base) else []))
