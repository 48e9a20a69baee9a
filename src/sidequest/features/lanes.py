"""The lanes' part of a job's life: a laned job that ends frees its group's place and stages more.

Lanes themselves (groups and priorities: the keys, the staging, the push) are the store's
(`store.lanes`), since the push and the poller stage too. What a job's end does is this
feature's lifecycle operation, run in the same atomic call as the job's move: the job's jid
leaves its group's running set (`group_concurrency` counts it no more) and the queue's lanes are
staged (`lane_ended`: at once after a high-priority job, else once the queue holds fewer than
LANE_REFILL jobs, a batch at a time), so the next job of a group at its limit, or of the next
group in turn, reaches the queue.

A job put back at shutdown or recovered from a dead process goes to the head of its queue and
stays counted: it is still the group's, and runs next.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sidequest.store import keys, lanes
from sidequest.worker.outcome import Outcome

# Points where a laned job stops being staged or running (see `lifecycle.POINTS`).
ENDED = frozenset({"finished", "retried", "dead", "dropped", "snoozed", "cancelled", "deleted", "killed"})

# args: the queue's lanes base, its queue key, the job's group ('' for none), its jid, its level
LANES_FEATURE = """
FEATURES['lanes'] = function(point, now, a)
  lane_done(a[1], a[3], a[4])
  lane_ended(a[1], a[2], a[5])
end
"""


class LanesFeature:
    """Frees a laned job's place in its group and stages its queue's lanes where it ends."""

    name = "lanes"
    marks: frozenset[str] | None = frozenset({"group", "priority"})  # ops only for laned payloads
    observes, wraps = False, False
    lua = LANES_FEATURE

    def __init__(self, space: keys.Keyspace = keys.DEFAULT) -> None:
        self.space = space  # in Cluster mode a queue's lanes live in its slot

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        if point not in ENDED and not (point == "recovered" and outcome is not None and outcome.kind == "dead"):
            return None
        jid = payload.get("jid")
        if ("group" not in payload and "priority" not in payload) or not isinstance(jid, str):
            return None
        # the queue whose lanes staged it: a retry's payload already names its `retry_queue`
        queue = (outcome.origin if outcome is not None else None) or str(payload.get("queue") or "default")
        return [self.space.lanes(queue), self.space.queue(queue), lanes.group_of(payload), jid,
                str(lanes.level_of(payload))]

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""
