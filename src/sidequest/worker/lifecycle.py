"""The points of a job's life, and the seam features plug into.

    taken      a processor decoded the job and is about to run it
    finished   it returned (applied within a few milliseconds, with other successes, see fetch)
    retried    it failed and waits in `retry`
    dead       it failed for the last time, or could not be decoded, and is in `dead`
    dropped    it ended without a trace in Redis (retry=False, dead=False, a business failure)
    put_back   shutdown put it back at the head of its queue, unchanged
    recovered  its process died; another process put it back (or, past the limit, in `dead`)
    snoozed    a rate limit was full (`limiter`): it waits in `schedule`, no retry spent
    cancelled  it was cancelled (`cancellation`): stopped while running, or removed from where it waited

and three that an operator causes through the admin API (`api`), on a job in a queue or in
`schedule`, `retry` or `dead`:

    requeued   an operator retried it or ran it now: it is back in its queue
    deleted    an operator deleted it
    killed     an operator moved it to `dead`

A feature (tasks, unique claims, status records) contributes Lua functions to the scripts that
apply these points (`lua`), and for each job and point the operations to run there (`ops`),
with their values taken from the decoded payload in Python and passed as script arguments. The
operations run inside the same atomic call that moves the job, and only if the move happened.
The core (fetch, processor, manager, retry, recovery) calls `Lifecycle.ops` and never names a
feature.

A feature may also wrap the run of a job (`running`), e.g. to let the job report progress
(tasks) or read its cancel flag (cancellation), and observe an outcome once it has been written
(`observe`), e.g. to count it in memory (the per-job metrics).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sidequest.worker.outcome import Outcome

POINTS = ("taken", "finished", "retried", "dead", "dropped", "put_back", "recovered",
          "requeued", "deleted", "killed", "snoozed", "cancelled")

Op = tuple[str, list[Any]]  # (feature's Lua name, its arguments)


class Feature(Protocol):
    """What a feature gives the lifecycle."""

    name: str  # the key of its function in the scripts' FEATURES table
    lua: str  # Lua defining FEATURES[name] = function(point, now, args) ... end
    marks: frozenset[str] | None  # payload keys without which `ops` is None (None: any payload may have ops)

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        """The arguments of this feature's operation for `payload` at `point`, or None."""
        ...

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        """A context entered while the job runs, or None."""
        ...

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Called in this process once the outcome at `point` has been written."""
        ...


class Lifecycle:
    def __init__(self, features: Sequence[Feature] = ()) -> None:
        self.features = list(features)
        self.lua = "\n".join(f.lua for f in self.features)
        # A payload holding none of these keys has no operations at any point (most jobs): one
        # set test instead of a call per feature. None when a feature may have ops for any payload.
        marks: frozenset[str] | None = frozenset()
        for feature in self.features:
            own = getattr(feature, "marks", None)  # a feature without marks is asked about every payload
            marks = None if marks is None or own is None else marks | own
        self.marks = marks
        # only the features whose hooks do something are asked on every job's path
        self._observers = [f for f in self.features if getattr(f, "observes", True)]
        self._wrappers = [f for f in self.features if getattr(f, "wraps", True)]

    def ops(self, point: str, payload: dict[str, Any] | None, outcome: Outcome | None = None) -> list[Any]:
        """The script arguments for every feature's operation at `point`: `n, (name, k, args...)*`."""
        if payload is None or not self.features or (self.marks is not None and self.marks.isdisjoint(payload)):
            return [0]
        flat: list[Any] = []
        count = 0
        for feature in self.features:
            args = feature.ops(point, payload, outcome)
            if args is not None:
                flat += [feature.name, len(args), *args]
                count += 1
        return [count, *flat]

    def observe(self, point: str, payload: dict[str, Any] | None, outcome: Outcome | None) -> None:
        if payload is not None:
            for feature in self._observers:
                feature.observe(point, payload, outcome)

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[Any]:
        """The features' contexts for the run of this job, entered together."""
        contexts = [c for feature in self._wrappers if (c := feature.running(payload)) is not None]
        if len(contexts) == 1:  # the usual case: no ExitStack on every job's path
            return contexts[0]
        return _entered_together(contexts) if contexts else _NOTHING


_NOTHING = contextlib.nullcontext()


@contextlib.contextmanager
def _entered_together(contexts: list[AbstractContextManager[Any]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


def has_ops(ops: list[Any]) -> bool:
    return bool(ops) and ops[0] != 0
