"""`StepsFeature`: a job's step records leave with the job, in the call that ends it.

Its operation runs where the job ends: `finished` (a job whose run used a step: the mark in its
payload), and, asked whatever the payload holds (`always_at`, as a stored payload cannot carry the
mark), `dropped` (discarded, retry=False, expired), `cancelled` and an operator's `deleted`. It
removes the records only if they are this incarnation's (the same digest of class and arguments).
A retry, a put-back, a recovery, `dead` and an operator's kill or retry keep them: the next run
resumes past the recorded steps.

A job parked by a durable wait (`waits`: its payload marked `errors.WAITING`) is asked at
`snoozed`: the call that parks it keeps its entry in the records (`parked`), where `send_event`
finds it from the jid.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sidequest.errors import WAITING
from sidequest.features.steps.lua import STEPS_FEATURE
from sidequest.features.steps.observer import StepMetrics
from sidequest.features.steps.records import MARK, digest_of
from sidequest.store import keys
from sidequest.worker.outcome import Outcome

ENDS = frozenset({"finished", "dropped", "cancelled", "deleted"})


class StepsFeature:
    name = "steps"
    lua = STEPS_FEATURE
    marks: frozenset[str] | None = frozenset({MARK, WAITING})  # a run that called `step` (in memory only), a parked job
    always_at = frozenset({"dropped", "cancelled", "deleted"})  # rare ends: asked for every payload
    observes, wraps = False, False

    def __init__(self, space: keys.Keyspace, clock: Callable[[], float] = time.time) -> None:
        self.space = space
        self.flush = StepMetrics(clock).flush  # the step counts, written with each heartbeat

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        jid = payload.get("jid")
        if not isinstance(jid, str):
            return None
        if point == "snoozed":
            return self._park(jid, payload, outcome)
        if point not in ENDS:
            return None
        digest = payload.get(MARK)
        if not isinstance(digest, str):
            if point == "finished" and WAITING not in payload:  # another feature's mark let it in: no step
                return None
            digest = digest_of(payload)
        return [self.space.steps(jid, str(payload.get("queue"))), digest]

    def _park(self, jid: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        wait = payload.get(WAITING)
        if not isinstance(wait, dict) or outcome is None or outcome.blob is None:
            return None  # a rate limit's snooze: nothing to keep
        queue = str(payload.get("queue"))
        event = wait.get("event")
        return [self.space.steps(jid, queue), digest_of(payload), "park", outcome.blob, self.space.schedule(queue),
                event if isinstance(event, str) else ""]

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""
