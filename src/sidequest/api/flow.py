"""The counts of debounce and throttle (see `features.flow`): how many pushes each job class had
replaced by a newer one (debounce) or dropped within a period (throttle), since ever.

    flow_counts()   # {"Reindex": {"replaced": 49, "dropped": 0}, "Notify": {"replaced": 0, "dropped": 12}}
"""

from __future__ import annotations

from typing import Any

from sidequest.client.sync_client import Client, default_client
from sidequest.features.flow import KINDS
from sidequest.store import keys


def flow_counts(client: Client | None = None) -> dict[str, dict[str, int]]:
    """Per job class, the pushes debounce replaced and throttle dropped (classes without any: absent).
    In Cluster mode the counts live in each queue's slot; they are added up over `queues`."""
    chosen = client or default_client()
    space = chosen.keys
    queues = sorted(map(_text, chosen.redis.smembers(keys.QUEUES))) if space.cluster else [""]
    counts: dict[str, dict[str, int]] = {}
    for _, _, counted in KINDS:
        for where in dict.fromkeys(space.flow(counted, queue) for queue in queues):
            for name, value in chosen.redis.hgetall(where).items():
                entry = counts.setdefault(_text(name), {kind: 0 for _, _, kind in KINDS})
                entry[counted] += int(value)
    return counts


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
