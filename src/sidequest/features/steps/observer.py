"""Step counts of this process, per job class, in memory until the heartbeat writes them.

`ran` and `replayed` are called by the steps themselves (`run`); the worker's heartbeat takes the
counts with each beat (`StepMetrics.flush`, registered as the `steps` plugin's flush) and writes
them into the per-job metrics minute (`job_metrics`' hash, fields `<class>|s...`). Labelled by job
class only, never by step name: names may be built at run time (`send-{i}`), and a label per name
would grow without bound.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sidequest.store import keys

RETENTION = 72 * 3600  # as the per-job metrics' minutes (`job_metrics.RETENTION`)


@dataclass
class StepTally:
    ran: int = 0  # bodies that ended (returned or raised)
    failed: int = 0  # of which raised (or returned what could not be recorded)
    replayed: int = 0  # steps returned from their record, body not called
    seconds: float = 0.0  # time in the bodies that ended


_lock = threading.Lock()
_tallies: dict[str, StepTally] = {}


def ran(klass: str, seconds: float, failed: bool) -> None:
    with _lock:
        tally = _tallies.setdefault(klass, StepTally())
        tally.ran += 1
        tally.failed += failed
        tally.seconds += max(seconds, 0.0)


def replayed(klass: str) -> None:
    with _lock:
        _tallies.setdefault(klass, StepTally()).replayed += 1


def take() -> dict[str, StepTally]:
    global _tallies
    with _lock:
        taken, _tallies = _tallies, {}
    return taken


def give_back(taken: dict[str, StepTally]) -> None:
    with _lock:
        for klass, tally in taken.items():
            into = _tallies.setdefault(klass, StepTally())
            into.ran += tally.ran
            into.failed += tally.failed
            into.replayed += tally.replayed
            into.seconds += tally.seconds


class StepMetrics:
    """The heartbeat's flush of the step counts (see the module)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    def flush(self, pipe: Any) -> Callable[[], None]:
        from sidequest.features.job_metrics import minute_of

        taken = take()
        if taken:
            key = keys.metrics(minute_of(self.clock()))
            for klass, tally in taken.items():
                for part, value in (("s", tally.ran), ("sf", tally.failed), ("sr", tally.replayed)):
                    if value:
                        pipe.hincrby(key, f"{klass}|{part}", value)
                if tally.ran:
                    pipe.hincrbyfloat(key, f"{klass}|sms", round(tally.seconds * 1000, 3))
            pipe.expire(key, RETENTION)
        return lambda: give_back(taken)


def read_minutes(client: Any, minutes: list[str]) -> dict[str, dict[str, StepTally]]:
    """minute -> job class -> its step counts, from the per-job metrics' minutes (one round trip)."""
    pipe = client.pipeline(transaction=False)
    for minute in minutes:
        pipe.hgetall(keys.metrics(minute))
    found: dict[str, dict[str, StepTally]] = {}
    for minute, raw in zip(minutes, pipe.execute(), strict=True):
        for field_name, value in raw.items():
            klass, _, part = field_name.decode().rpartition("|")
            if part not in ("s", "sf", "sr", "sms"):
                continue
            tally = found.setdefault(minute, {}).setdefault(klass, StepTally())
            if part == "sms":
                tally.seconds = float(value) / 1000
            else:
                setattr(tally, {"s": "ran", "sf": "failed", "sr": "replayed"}[part], int(value))
    return found
