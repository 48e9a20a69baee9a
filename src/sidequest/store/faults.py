"""A feature's error inside a core move: that job's fault, logged with its jid, never an outage.

The core scripts run the features' operations after the job's move, each under `pcall` (see
`scripts`): an error reply of a feature's command (a workflow's state, a unique claim or a status
record that someone set to another type by hand: WRONGTYPE) neither aborts nor half-applies the
move, and the other jobs of the same call keep their operations. The script returns the faults
beside its reply; this module takes them out of the reply and logs one line per job and
operation, with the job's class and jid, the point of its life, the keys the operation was given,
and Redis's error. The job's fate stands: the move was made. At `taken` that means the job runs
(its feature's record of the start is what is missing); see docs/reliability.md.

RESERVE also reports a queue whose key has the wrong type (the jobs of the other queues are taken
as usual); `QueueFaults` logs that once per queue and error, not at every fetch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from sidequest.jobs.payload import decode

log = logging.getLogger(__name__)

FIELDS = 5  # tag, feature, point, error, keys: one fault in a reply (see scripts.run_ops)
Fault = tuple[int, str, str, str, str]
QUEUE_REPEAT = 60.0  # seconds before the same fault of a queue is logged again

CONSEQUENCE = {"taken": "it runs anyway", "put_back": "it is back in its queue"}


def split(reply: Any) -> tuple[Any, list[Fault]]:
    """(value, faults) of a reply made by the scripts' `answer`: the bare value when none failed."""
    if not isinstance(reply, list):
        return reply, []
    return reply[0], parse(reply[1:])


def split_reserve(reply: list[Any]) -> tuple[list[Any], list[Fault]]:
    """(jobs, faults) of a RESERVE reply: an odd length means the faults came last."""
    if len(reply) % 2 == 0:
        return reply, []
    return reply[:-1], parse(reply[-1])


def parse(flat: Sequence[Any]) -> list[Fault]:
    return [(int(flat[i]), _text(flat[i + 1]), _text(flat[i + 2]), _text(flat[i + 3]), _text(flat[i + 4]))
            for i in range(0, len(flat) - FIELDS + 1, FIELDS)]


def report(raw: bytes, faults: Sequence[Fault]) -> None:
    """Log each fault of the job `raw` (see module)."""
    name, jid = _named(raw)
    for _, feature, point, error, keys in faults:
        log.error("%s %s: the %s feature's operation at %r failed on %s (%s); the job's move stands, %s. "
                  "Fix or delete that key", name, jid, feature, point, keys or "its keys", error,
                  CONSEQUENCE.get(point, "its outcome is written"))


def settled(reply: Any, raw: bytes) -> Any:
    """The value of a script's reply about the job `raw`, its faults logged."""
    value, faults = split(reply)
    if faults:
        report(raw, faults)
    return value


def reserved(reply: list[Any], acks: Sequence[tuple[Any, ...]], queues: QueueFaults) -> list[Any]:
    """The jobs of a RESERVE reply (queue key, job, ...), its faults logged (`report_reserve`)."""
    jobs, found = split_reserve(reply)
    if found:
        report_reserve(found, acks, queues)
    return jobs


def report_reserve(faults: Sequence[Fault], acks: Sequence[tuple[Any, ...]], queues: QueueFaults) -> None:
    """Log RESERVE's faults: an acknowledgement's (`acks[tag - 1]`, its bytes first) or a queue's."""
    for fault in faults:
        tag = fault[0]
        if tag > 0:
            report(acks[tag - 1][0], [fault])
        else:
            queues.report(fault[4], fault[3])


def wrong_type(exc: BaseException) -> bool:
    """Whether a blocking fetch's error is its queue's key holding another type (that queue's
    fault, as RESERVE reports it), not Redis refusing calls."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("WRONGTYPE")


class QueueFaults:
    """A queue whose key has the wrong type: logged once per queue and error, again only after
    QUEUE_REPEAT (a fetch meets it every time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._told: dict[tuple[tuple[str, str], str], float] = {}
        self._lock = threading.Lock()

    def report(self, key: str, error: str) -> None:
        if not self._first(("key", key), error):
            return
        log.error("queue key %s cannot be read as a queue (%s); the other queues are fetched as usual. "
                  "Fix or delete that key", key, error)

    def call_failed(self, queue: str, exc: BaseException) -> None:
        """Cluster mode: the call of one queue of a fetch failed, the others took jobs."""
        if self._first(("call", queue), type(exc).__name__):
            log.warning("fetching from queue %r failed (%s: %s); the jobs taken from the other queues run, and "
                        "it is tried again at the next fetch", queue, type(exc).__name__, exc)

    def _first(self, subject: tuple[str, str], error: str) -> bool:
        """True unless this subject's error was logged less than QUEUE_REPEAT ago."""
        now = self.clock()
        with self._lock:
            told = self._told.get((subject, error))
            if told is not None and now - told < QUEUE_REPEAT:
                return False
            self._told[(subject, error)] = now
            return True


def _named(raw: bytes) -> tuple[str, str]:
    """(class, jid) of a job for a log line; placeholders for bytes that are not a job."""
    try:
        payload = decode(raw)
    except ValueError:
        return "a job", "(not decodable)"
    return str(payload.get("class", "a job")), str(payload.get("jid", ""))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
