"""The OpenTelemetry instruments beyond one job's run: jobs retried and dead, counted by each worker
process, and the fleet's queues and slots, observed from Redis by one process that opts in.

Each worker counts what it files itself (`sidequest.job.retried`, `sidequest.job.dead`), so a
collector adds the processes up. The gauges (queue size, latency, lanes waiting, busy and
capacity per queue and per capsule) describe the whole fleet as Redis holds it: read by every
process, a collector that sums processes would count them once per process. So they are reported
only where `instrument(report_fleet=True)` is asked, in one process (the dashboard's, or a
small exporter): the same numbers `/metrics` gives Prometheus, read through the same admin API.

One collection reads Redis once for every gauge (a reading serves the callbacks of the next
`READING_TTL` seconds), and a collection while Redis is away reports nothing, with one warning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from opentelemetry.metrics import CallbackOptions, Counter, Meter, Observation

from sidequest.api import Load, Stats, lanes_waiting
from sidequest.client.sync_client import Client
from sidequest.errors import RedisUnavailableError
from sidequest.jobs.payload import display_name
from sidequest.worker.lifecycle import Plugin, Setting, register, unregister
from sidequest.worker.outcome import Outcome, error_class_name

logger = logging.getLogger(__name__)

SYSTEM = "sidekiq"  # as the spans say: the queues and the wire format are Sidekiq's
MESSAGING_SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
JOB_CLASS = "messaging.sidekiq.job_class"
ERROR_TYPE = "error.type"
CAPSULE = "sidequest.capsule"  # no messaging convention names a pool of consumers
PLUGIN = "opentelemetry"
READING_TTL = 1.0  # seconds one Redis reading answers the gauges' callbacks (one collection)


# -- retried and dead: counted where they happen --------------------------------------------------

class OutcomeCounters:
    """A lifecycle feature that only observes: counts the jobs this process filed in `retry` and in
    `dead`, once the move is written. It writes nothing to Redis (no Lua, no operations)."""

    name = PLUGIN
    lua = ""
    marks: frozenset[str] | None = frozenset()
    observes, wraps = True, False

    def __init__(self, retried: Counter, dead: Counter) -> None:
        self.retried, self.dead = retried, dead
        self.on = True  # `uninstrument()` turns off the counters of workers built while it was on

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        return None

    def running(self, payload: dict[str, Any]) -> None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        if not self.on or point not in ("retried", "dead"):
            return
        attributes = {MESSAGING_SYSTEM: SYSTEM, DESTINATION: str(payload.get("queue", "?")),
                      JOB_CLASS: display_name(payload)}
        if outcome is not None and outcome.error is not None:
            attributes[ERROR_TYPE] = error_class_name(outcome.error)
        (self.retried if point == "retried" else self.dead).add(1, attributes)


def count_outcomes(meter: Meter) -> Callable[[], None]:
    """Register the counters with every worker built from now on; the returned call takes them out."""
    counters = OutcomeCounters(
        meter.create_counter("sidequest.job.retried", unit="{job}", description="Failed runs filed in the retry set"),
        meter.create_counter("sidequest.job.dead", unit="{job}", description="Jobs filed in the dead set"))

    def feature(setting: Setting) -> OutcomeCounters:
        return counters

    register(Plugin(PLUGIN, feature=feature))

    def stop() -> None:
        counters.on = False
        unregister(PLUGIN)

    return stop


# -- the fleet's gauges: read from Redis by one process ---------------------------------------------

@dataclass(frozen=True)
class QueueRow:
    name: str
    size: int
    latency: float  # seconds
    lanes: int  # jobs waiting in its lanes


@dataclass
class Reading:
    """What one collection reports, read in a few round trips."""

    at: float = 0.0  # time.monotonic() when read; 0: never
    queues: list[QueueRow] = field(default_factory=list)
    load: Load | None = None


class FleetGauges:
    """The observable gauges of the fleet, with one reading shared by their callbacks."""

    def __init__(self, client: Client, clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.clock = client, clock
        self._lock = threading.Lock()  # two readers collecting at once read Redis once
        self._reading = Reading()
        self._warned = False
        self.on = True  # `uninstrument()` turns them off: OpenTelemetry cannot take an instrument back

    def register(self, meter: Meter) -> None:
        gauges = (
            ("sidequest.queue.size", "{job}", "Jobs waiting in the queue", self._sizes),
            ("sidequest.queue.latency", "s", "Seconds the queue's oldest job has waited", self._latencies),
            ("sidequest.queue.lanes.waiting", "{job}", "Jobs pushed with a group or a priority still waiting in "
             "the queue's lanes (not yet in its size or latency)", self._lanes),
            ("sidequest.queue.busy", "{job}", "Jobs from the queue running now, over every process", self._busy),
            ("sidequest.queue.capacity", "{slot}", "Slots of live worker processes (not quiet) that fetch from "
             "the queue", self._capacity),
            ("sidequest.capsule.busy", "{job}", "Jobs of the capsule running now, per queue", self._capsule_busy),
            ("sidequest.capsule.capacity", "{slot}", "Slots of the capsule in live worker processes (not quiet)",
             self._capsule_capacity),
        )
        for name, unit, description, callback in gauges:
            meter.create_observable_gauge(name, callbacks=[callback], unit=unit, description=description)

    def reading(self) -> Reading:
        """The last reading, or a new one when it is older than `READING_TTL`; empty while Redis is away."""
        with self._lock:
            if not self.on:
                return Reading()
            if self.clock() - self._reading.at < READING_TTL:
                return self._reading
            try:
                stats, load = Stats(self.client), Load(self.client)
                names = [q.name for q in stats.queue_summaries]
                lanes = lanes_waiting(names, self.client)
            except (redis.RedisError, RedisUnavailableError) as exc:  # an outage: the next collection tries again
                if not self._warned:
                    logger.warning("sidequest gauges: Redis did not answer (%s); nothing reported until it does",
                                   type(exc).__name__)
                self._warned = True
                return Reading()
            self._warned = False
            self._reading = Reading(self.clock(), [QueueRow(q.name, q.size, q.latency, lanes[q.name])
                                                   for q in stats.queue_summaries], load)
            return self._reading

    def _per_queue(self, value: Callable[[QueueRow], float]) -> Iterator[Observation]:
        for row in self.reading().queues:
            yield Observation(value(row), {MESSAGING_SYSTEM: SYSTEM, DESTINATION: row.name})

    def _sizes(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_queue(lambda row: row.size)

    def _latencies(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_queue(lambda row: row.latency)

    def _lanes(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_queue(lambda row: row.lanes)

    def _busy(self, options: CallbackOptions) -> Iterable[Observation]:
        load = self.reading().load
        for name, queue in sorted(load.queues.items()) if load else ():
            yield Observation(queue.busy, {MESSAGING_SYSTEM: SYSTEM, DESTINATION: name})

    def _capacity(self, options: CallbackOptions) -> Iterable[Observation]:
        load = self.reading().load
        for name, queue in sorted(load.queues.items()) if load else ():
            yield Observation(queue.capacity, {MESSAGING_SYSTEM: SYSTEM, DESTINATION: name})

    def _capsule_busy(self, options: CallbackOptions) -> Iterable[Observation]:
        load = self.reading().load
        for name, capsule in sorted(load.capsules.items()) if load else ():
            for queue, count in sorted(capsule.busy.items()):
                yield Observation(count, {MESSAGING_SYSTEM: SYSTEM, CAPSULE: name, DESTINATION: queue})

    def _capsule_capacity(self, options: CallbackOptions) -> Iterable[Observation]:
        load = self.reading().load
        for name, capsule in sorted(load.capsules.items()) if load else ():
            yield Observation(capsule.capacity, {MESSAGING_SYSTEM: SYSTEM, CAPSULE: name})
