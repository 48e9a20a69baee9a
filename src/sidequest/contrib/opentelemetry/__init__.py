"""OpenTelemetry for sidequest: a PRODUCER span per push, a CONSUMER span per job run, the trace
context carried in the job payload, and messaging metrics (extra `otel`).

    from sidequest.contrib.opentelemetry import SidequestInstrumentor

    SidequestInstrumentor().instrument()                          # propagation_style="link"
    SidequestInstrumentor().instrument(propagation_style="child", tracer_provider=provider)
    SidequestInstrumentor().uninstrument()

The hooks are links of the process-wide middleware chains (`sidequest.jobs.middleware.PROCESS_CLIENT`
and `PROCESS_SERVER`), put first so they wrap every other link: every `Client` and every worker of
the process uses them, `sidequest worker` included when a `-r` module calls `instrument()`.

It follows OpenTelemetry's messaging conventions and Ruby Sidekiq's instrumentation
(opentelemetry-instrumentation-sidekiq), so one trace crosses Ruby and Python on one Redis:
- the context travels as top-level keys of the payload, written by the global propagator (W3C
  `traceparent`, `tracestate`, and `baggage` when configured), as the Ruby middleware writes it;
- spans are `<queue> publish` and `<queue> process`; `messaging.system` is "sidekiq", because the
  queues and the wire format are Sidekiq's: one value groups a queue's Ruby and Python spans (the
  instrumentation scope, this module's name, tells the two apart);
- `propagation_style` is Ruby's option: "link" (its default, and the conventions' advice: a job's
  trace starts when it runs, linked to the push), "child" (one trace from push to run), "none".
Metrics: `messaging.client.sent.messages` per push; `messaging.client.consumed.messages` and
`messaging.process.duration` per run, with `error.type` when it failed; `sidequest.job.retried`
and `sidequest.job.dead` per job filed there by this process's workers; and, in the one process
that asks for them (`report_fleet=True`), the fleet's gauges read from Redis (`gauges`).
sidequest's own Prometheus metrics are unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.metrics import Counter, Histogram, get_meter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from sidequest import __version__
from sidequest.client.sync_client import default_client
from sidequest.contrib.opentelemetry.gauges import FleetGauges, count_outcomes
from sidequest.errors import Cancelled, OverLimit, Suspended
from sidequest.jobs.middleware import PROCESS_CLIENT, PROCESS_SERVER
from sidequest.jobs.payload import display_name
from sidequest.worker.outcome import error_class_name

STYLES = ("link", "child", "none")
SYSTEM = "sidekiq"
# the messaging conventions' names (opentelemetry-semantic-conventions keeps them "incubating")
MESSAGING_SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
JOB_CLASS = "messaging.sidekiq.job_class"  # Ruby's attribute for the job's class
RETRY_COUNT = "messaging.sidekiq.retry_count"  # the payload's `retry_count`: absent on a first run
ERROR_TYPE = "error.type"
# the conventions' advice for messaging durations, in seconds
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# a job that stopped itself (rate limit, cancel) ended as designed: not an error
CONTROL = (OverLimit, Cancelled, Suspended)


@dataclass(frozen=True)
class Telemetry:
    """What both hooks use: the tracer, the instruments, and the propagation style."""

    tracer: trace.Tracer
    sent: Counter
    consumed: Counter
    duration: Histogram
    style: str

    def attributes(self, payload: dict[str, Any], queue: str, operation: str) -> dict[str, Any]:
        return {MESSAGING_SYSTEM: SYSTEM, DESTINATION: queue, OPERATION_NAME: operation,
                OPERATION_TYPE: "send" if operation == "publish" else operation, JOB_CLASS: display_name(payload)}


class ProducerHook:
    """Client middleware: the `<queue> publish` span, and the trace context written into the payload.

    Like Sidekiq's client middleware, it runs before the Redis write (the chain builds the payload;
    the push follows), so the span covers building the job, not the round trip."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def __call__(self, job_name: str, payload: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        t = self.telemetry
        attributes = t.attributes(payload, queue, "publish")
        with t.tracer.start_as_current_span(f"{queue} publish", kind=SpanKind.PRODUCER,
                                            attributes={**attributes, MESSAGE_ID: str(payload.get("jid"))}):
            propagate.inject(payload)  # while the producer span is current: the job's parent is this push
            pushed = call_next()
        if pushed is not None:  # None: a later link stopped the push
            t.sent.add(1, attributes)
        return pushed


class ConsumerHook:
    """Server middleware: the `<queue> process` span around the run, its status, and the run metrics."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def __call__(self, job: Any, payload: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        t = self.telemetry
        attributes = t.attributes(payload, queue, "process")
        span_attributes = {**attributes, MESSAGE_ID: str(payload.get("jid"))}
        if isinstance(payload.get("retry_count"), int):
            span_attributes[RETRY_COUNT] = payload["retry_count"]
        context, links = self.parent(payload)
        started = time.monotonic()
        with t.tracer.start_as_current_span(f"{queue} process", context=context, kind=SpanKind.CONSUMER,
                                            attributes=span_attributes, links=links, record_exception=False,
                                            set_status_on_exception=False) as span:
            try:
                return call_next()
            except CONTROL as exc:
                span.add_event("sidequest.stopped", {"sidequest.reason": error_class_name(exc)})
                raise
            except BaseException as exc:  # SystemExit from a job is a job failure too
                error = error_class_name(exc)
                attributes[ERROR_TYPE] = error
                span.set_attribute(ERROR_TYPE, error)
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{error}: {exc}"))
                raise
            finally:
                t.consumed.add(1, attributes)
                t.duration.record(time.monotonic() - started, attributes)

    def parent(self, payload: dict[str, Any]) -> tuple[Any, list[Link]]:
        """The context to start the span in, and its links, by the propagation style. "link" and
        "none" start a new trace but keep the pushed baggage current, as Ruby does."""
        pushed = propagate.extract(payload)
        if self.telemetry.style == "child":
            return pushed, []
        root = trace.set_span_in_context(trace.INVALID_SPAN, pushed)
        producer = trace.get_current_span(pushed).get_span_context()
        if self.telemetry.style == "link" and producer.is_valid:
            return root, [Link(producer)]
        return root, []


class SidequestInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """`instrument(propagation_style="link", tracer_provider=None, meter_provider=None,
    report_fleet=False, client=None)`; `uninstrument()` takes the hooks out. The global providers
    are used when none is given. `report_fleet=True` adds the fleet's gauges, read from Redis
    through `client` (the default client when None): ask for it in one process only."""

    # on the class: BaseInstrumentor makes one instance per class, and `__init__` runs on every call
    _hooks: tuple[ProducerHook, ConsumerHook] | None = None
    _stop_counting: Callable[[], None] | None = None
    _fleet: FleetGauges | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("sidequest >= 0.1",)

    def _instrument(self, **kwargs: Any) -> None:
        style = kwargs.get("propagation_style", "link")
        if style not in STYLES:
            raise ValueError(f"propagation_style must be one of {', '.join(STYLES)}; got {style!r}")
        tracer = trace.get_tracer(__name__, __version__, tracer_provider=kwargs.get("tracer_provider"))
        meter = get_meter(__name__, __version__, meter_provider=kwargs.get("meter_provider"))
        telemetry = Telemetry(
            tracer=tracer,
            sent=meter.create_counter("messaging.client.sent.messages", unit="{message}",
                                      description="Jobs pushed"),
            consumed=meter.create_counter("messaging.client.consumed.messages", unit="{message}",
                                          description="Job runs, failed or not (error.type says which)"),
            duration=meter.create_histogram("messaging.process.duration", unit="s", description="Job run time",
                                            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS)),
            style=style)
        self._hooks = (ProducerHook(telemetry), ConsumerHook(telemetry))
        PROCESS_CLIENT.prepend(self._hooks[0])
        PROCESS_SERVER.prepend(self._hooks[1])
        self._stop_counting = count_outcomes(meter)
        if kwargs.get("report_fleet"):
            self._fleet = FleetGauges(kwargs.get("client") or default_client())
            self._fleet.register(meter)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._hooks is not None:
            PROCESS_CLIENT.remove(self._hooks[0])
            PROCESS_SERVER.remove(self._hooks[1])
            self._hooks = None
        if self._stop_counting is not None:
            self._stop_counting()
            self._stop_counting = None
        if self._fleet is not None:
            self._fleet.on = False
            self._fleet = None
