"""`StepsFeature`: a job's step records leave with the job, in the call that ends it.

Its operation runs where the job ends: `finished` (a job whose run used a step: the mark in its
payload), and, asked whatever the payload holds (`always_at`, as a stored payload cannot carry the
mark), `dropped` (discarded, retry=False, expired), `cancelled` and an operator's `deleted`. It
removes the records only if they are this incarnation's (the same digest of class and arguments).
A retry, a put-back, a recovery, `dead` and an operator's kill or retry keep them: the next run
resumes past the recorded steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sidequest.features.steps.lua import STEPS_FEATURE
from sidequest.features.steps.observer import StepMetrics
from sidequest.features.steps.records import MARK, digest_of
from sidequest.store import keys
from sidequest.worker.outcome import Outcome

ENDS = frozenset({"finished", "dropped", "cancelled", "deleted"})


class StepsFeature:
    name = "steps"
    lua = STEPS_FEATURE
    marks: frozenset[str] | None = frozenset({MARK})  # a run that called `step` (in memory only)
    always_at = frozenset({"dropped", "cancelled", "deleted"})  # rare ends: asked for every payload
    observes, wraps = False, False

    def __init__(self, space: keys.Keyspace, clock: Callable[[], float] = time.time) -> None:
        self.space = space
        self.flush = StepMetrics(clock).flush  # the step counts, written with each heartbeat

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        if point not in ENDS:
            return None
        digest = payload.get(MARK)
        if not isinstance(digest, str):
            if point == "finished":  # another feature's mark let the job in: it used no step
                return None
            digest = digest_of(payload)
        jid = payload.get("jid")
        if not isinstance(jid, str):
            return None
        return [self.space.steps(jid, str(payload.get("queue"))), digest]

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""
