"""The progress of iterable jobs (`sidequest.IterableJob`), for the dashboard, `top` and scripts.

    state = Iteration.find(jid)          # None for a job with no saved progress
    state.cursor, state.items, state.per_item, state.executions, state.state

    Iteration().running()                # {jid: state} of every iterable job running now
"""

from __future__ import annotations

from sidequest.api.processes import Work, Workers
from sidequest.client.sync_client import Client, default_client
from sidequest.features.iteration.state import IterationState, read_state, read_states


class Iteration:
    """Reads `sidequest:iteration:<jid>` records (see `iteration.state`)."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or default_client()

    @classmethod
    def find(cls, jid: str, client: Client | None = None) -> IterationState | None:
        return read_state((client or default_client()).redis, jid)

    def of(self, works: list[Work]) -> dict[str, IterationState]:
        """The progress of those of `works` that are iterable jobs, by jid (one round trip)."""
        jids = [jid for jid in (w.job.jid for w in works) if jid]
        return read_states(self.client.redis, jids) if jids else {}

    def running(self) -> dict[str, IterationState]:
        """Every iterable job running now, by jid."""
        return self.of(list(Workers(self.client)))
