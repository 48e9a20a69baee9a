"""Sentry for sidequest: each failed run reported once, a transaction per job, a span per push,
and the trace carried from push to run (extra `sentry`).

    import sentry_sdk
    from sidequest.contrib.sentry import SidequestIntegration

    sentry_sdk.init(dsn=..., traces_sample_rate=1.0, integrations=[SidequestIntegration()])

`setup_once` puts two links first in the process-wide middleware chains
(`sidequest.jobs.middleware.PROCESS_CLIENT`/`PROCESS_SERVER`), so every `Client` and worker of the
process uses them; they do nothing while no Sentry client with this integration is active.

In the worker, each job runs in its own isolation scope and transaction (op
`queue.task.sidequest`, named for the job's class, source "task", continuing the pushed trace;
a segment span of that name and op with sentry-sdk 3, see `tracing`) with a `queue.process`
span carrying the `messaging.*` data Sentry's Queues page reads. A failed run is captured once,
unhandled, with tags `sidequest_job`, `sidequest_jid`, `sidequest_queue` and a `sidequest`
context (class, jid, queue, retry count, args). Args are sent only where Sentry may collect
queue data (`data_collection`'s `queues`, or `send_default_pii=True` on 2.x SDKs without it),
else "[Filtered]", as Sentry's Celery, RQ and arq integrations do; Sentry's serializer trims
them like any event data.

Expected failures stay quiet while the job will be retried: those of `ignore_retries_of`, or
every failure with `report_after_job_retries=True` (sentry-ruby's Sidekiq option). The run that
exhausts the retries is reported. Stopping on a rate limit or a cancel is never an error.

On the producer side, a push inside a transaction gets a `queue.publish` span, and every push
carries the trace in the payload's `trace_propagation_headers` (`sentry-trace`, `baggage`), the
key sentry-ruby's Sidekiq middleware uses, so Ruby and Python continue each other's traces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import sentry_sdk
from sentry_sdk.integrations import Integration
from sentry_sdk.utils import capture_internal_exceptions

from sidequest.contrib.sentry import tracing
from sidequest.errors import Cancelled, JobFailed, OverLimit, Suspended
from sidequest.jobs.middleware import PROCESS_CLIENT, PROCESS_SERVER
from sidequest.jobs.payload import display_name, epoch
from sidequest.worker.launcher import WorkerSetup, configure_worker

HEADERS = "trace_propagation_headers"  # the payload key sentry-ruby's Sidekiq middleware writes
SYSTEM = "sidekiq"  # the queues and wire format are Sidekiq's (as in `contrib.opentelemetry`)
CONTROL = (OverLimit, Cancelled, Suspended)  # a job that stopped itself ended as designed: not an error
DEFAULT_MAX_RETRIES = 25  # `Config.max_retries`' default, for workers that did not say otherwise
_worker_max_retries: int | None = None  # the running `sidequest worker`'s, set by its hook
FILTERED = "[Filtered]"  # what Sentry's own integrations send in place of data it may not have


class SidequestIntegration(Integration):
    """`SidequestIntegration(report_after_job_retries=False, ignore_retries_of=(), max_retries=None,
    propagate_traces=True)`.

    `max_retries` is what `retry=True` means for the "will it be retried?" question: None takes
    the worker's own setting under `sidequest worker`, else 25 (a `Launcher` of your own with
    another `max_retries` should pass it)."""

    identifier = "sidequest"
    origin = f"auto.queue.{identifier}"

    def __init__(self, *, report_after_job_retries: bool = False,
                 ignore_retries_of: Iterable[type[BaseException]] = (), max_retries: int | None = None,
                 propagate_traces: bool = True) -> None:
        self.report_after_job_retries = report_after_job_retries
        self.ignore_retries_of = tuple(ignore_retries_of)
        self.max_retries = max_retries
        self.propagate_traces = propagate_traces

    @staticmethod
    def setup_once() -> None:
        PROCESS_CLIENT.prepend(_producer)
        PROCESS_SERVER.prepend(_consumer)
        configure_worker(_learn_max_retries)

    def quiet(self, payload: dict[str, Any], exc: BaseException) -> bool:
        """Whether this failure goes unreported: an expected one that will be retried."""
        expected = self.report_after_job_retries or isinstance(exc, self.ignore_retries_of)
        limit = self.max_retries if self.max_retries is not None else _worker_max_retries
        return expected and will_retry(payload, exc, DEFAULT_MAX_RETRIES if limit is None else limit)


def will_retry(payload: dict[str, Any], exc: BaseException, max_retries: int) -> bool:
    """Whether sidequest retries this failed run: `retry.Retrier.decide`'s rule, on the payload as
    fetched (`retry_count` is absent before the first failure, then 0, 1, ...)."""
    setting = payload.get("retry", True)
    if isinstance(exc, JobFailed) or setting is False:
        return False
    attempts = max_retries if setting is True else setting if isinstance(setting, int) else 0
    count = payload.get("retry_count")
    done = count + 1 if isinstance(count, int) and not isinstance(count, bool) else 0
    return done < attempts


def _learn_max_retries(worker: WorkerSetup) -> None:
    global _worker_max_retries
    _worker_max_retries = worker.config.max_retries


def _integration() -> SidequestIntegration | None:
    return sentry_sdk.get_client().get_integration(SidequestIntegration)


# -- producer --------------------------------------------------------------------------------------
def _producer(job_name: str, payload: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
    integration = _integration()
    if integration is None:
        return call_next()
    with tracing.publish_span(display_name(payload), integration.origin) as span:  # inside a span only
        if span is not None:
            _describe_span(span, payload, queue, processing=False)
        if integration.propagate_traces:  # taken inside the span: the job's run is its child
            payload[HEADERS] = dict(sentry_sdk.get_current_scope().iter_trace_propagation_headers())
        return call_next()


# -- consumer --------------------------------------------------------------------------------------
def _consumer(job: Any, payload: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
    integration = _integration()
    if integration is None:
        return call_next()
    name = display_name(payload)
    with sentry_sdk.isolation_scope() as scope:
        scope.clear_breadcrumbs()  # the processor thread's breadcrumbs belong to earlier jobs
        scope.add_event_processor(_job_details(payload, queue))
        headers = payload.get(HEADERS)
        sampling = {"sidequest_job": {"class": name, "queue": queue, "jid": payload.get("jid")}}
        with tracing.job_run(headers if isinstance(headers, dict) else {}, name, integration.origin,
                             sampling) as (transaction, span):
            _describe_span(span, payload, queue, processing=True)
            try:
                return _run(integration, transaction, payload, call_next)
            except CONTROL as exc:
                # raised again outside: leaving a transaction by an exception marks it an error
                tracing.set_outcome(transaction, "stopped")
                tracing.set_outcome(span, "stopped")
                stopped = exc
    raise stopped


def _run(integration: SidequestIntegration, transaction: Any, payload: dict[str, Any],
         call_next: Callable[[], Any]) -> Any:
    """The job, with the transaction's status, and a failure captured unless it is quiet."""
    try:
        result = call_next()
    except CONTROL:
        raise
    except BaseException as exc:  # SystemExit from a job is a job failure too
        tracing.set_outcome(transaction, "failed")
        if not integration.quiet(payload, exc):
            event, hint = tracing.failure_event(exc, {"type": integration.identifier, "handled": False})
            sentry_sdk.capture_event(event, hint=hint)
        raise
    tracing.set_outcome(transaction, "ok")
    return result


def _describe_span(span: Any, payload: dict[str, Any], queue: str, *, processing: bool) -> None:
    """The `messaging.*` data Sentry's Queues page reads."""
    tracing.set_data(span, "messaging.system", SYSTEM)
    tracing.set_data(span, "messaging.destination.name", queue)
    tracing.set_data(span, "messaging.message.id", payload.get("jid"))
    if isinstance(payload.get("retry_count"), int):
        tracing.set_data(span, "messaging.message.retry.count", payload["retry_count"])
    enqueued = epoch(payload.get("enqueued_at"))
    if enqueued is not None and processing and span.start_timestamp is not None:
        latency = max(0.0, span.start_timestamp.timestamp() - enqueued) * 1000
        tracing.set_data(span, "messaging.message.receive.latency", latency)


def _job_details(payload: dict[str, Any], queue: str) -> Callable[[Any, Any], Any]:
    """An event processor adding the job's tags and `sidequest` context to every event of its run."""
    def add(event: Any, hint: Any) -> Any:
        with capture_internal_exceptions():
            event.setdefault("tags", {}).update(
                sidequest_job=display_name(payload), sidequest_jid=payload.get("jid"), sidequest_queue=queue)
            event.setdefault("contexts", {})["sidequest"] = {
                "class": display_name(payload), "jid": payload.get("jid"), "queue": queue,
                "retry_count": payload.get("retry_count"), "args": _args(payload)}
        return event
    return add


def _args(payload: dict[str, Any]) -> Any:
    """The job's args, or "[Filtered]" unless the user lets Sentry have queue data."""
    return payload.get("args") if tracing.may_send_queue_data() else FILTERED
