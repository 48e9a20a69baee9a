"""Laned jobs pushed for the tests of what the admin API, the dashboard and the CLI show of a
queue's lanes: a queue full of plain jobs (so jobs of levels 0..5 stay in their lanes) and a
known mix of groups, priorities and limits."""

from __future__ import annotations

from jobs_for_tests import echo

from sidequest import Client
from sidequest.store.lanes import LANE_DEPTH


def fill(client: Client, queue: str) -> None:
    """LANE_DEPTH plain jobs: the queue has no room, so laned jobs of levels 0..5 wait in their lanes."""
    client.push_bulk(echo, [[queue, n] for n in range(LANE_DEPTH)], queue=queue)


def laned(client: Client, queue: str, n: int, **options: object) -> None:
    client.push_bulk(echo, [[queue, i] for i in range(n)], queue=queue, **options)


def scene(client: Client, queue: str) -> int:
    """On a full queue: tenant-a has 1 job staged at the head (priority 9) and 5 waiting;
    tenant-b 10 waiting at priority 9 (behind the head batch), limited to 10 a minute; tenant-c
    3 waiting, at most 2 at once; 7 jobs with a priority (0) and no group. How many were pushed."""
    fill(client, queue)
    laned(client, queue, 1, group="tenant-a", priority=9)
    laned(client, queue, 5, group="tenant-a")
    laned(client, queue, 10, group="tenant-b", priority=9, group_rate=(10, 60))
    laned(client, queue, 3, group="tenant-c", group_concurrency=2)
    laned(client, queue, 7, priority=0)
    return LANE_DEPTH + 1 + 5 + 10 + 3 + 7


def lane_keys(client: Client, queue: str) -> list[str]:
    """Every key of the queue's lanes (a SCAN: tests only)."""
    base = client.keys.lanes(queue)
    found = [k.decode() for k in client.redis.scan_iter(match=f"{base}:*", count=1000)]
    return sorted(found + ([base] if client.redis.exists(base) else []))
