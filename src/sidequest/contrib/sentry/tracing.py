"""Where the Sentry integration meets the SDK's tracing and privacy API, whose shape changed.

sentry-sdk 2 sends a transaction per job that holds its spans (`start_transaction`,
`span.set_data`, statuses such as `internal_error` and `cancelled`) and decides on personal data
with `send_default_pii` or, from 2.75, `data_collection`. sentry-sdk 3 (and 2.x with
`trace_lifecycle="stream"`) streams each span on its own: a segment span per job (`parent_span=None`),
`set_attribute`, statuses `ok` and `error` only, and `data_collection` alone. The integration
decides what to record (names, ops, data, the outcome); this module records it with the SDK at
hand. The SDK's API is reached as `Any` here: each generation's is typed, and one of them is
always missing, whichever is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Literal

import sentry_sdk
from sentry_sdk import utils

sdk: Any = sentry_sdk  # see module
Outcome = Literal["ok", "failed", "stopped"]  # the job's: ran, raised, stopped itself (a limit, a cancel)
TRANSACTION_STATUS: dict[Outcome, str] = {"ok": "ok", "failed": "internal_error", "stopped": "cancelled"}
SPAN_STATUS: dict[Outcome, str] = {"ok": "ok", "failed": "error", "stopped": "ok"}  # streamed: ok or error
TASK_OP, PROCESS_OP, PUBLISH_OP = "queue.task.sidequest", "queue.process", "queue.publish"


def streamed() -> bool:
    """Whether the SDK streams spans (sentry-sdk 3; 2.x when asked) rather than sending transactions."""
    if not hasattr(sentry_sdk, "start_transaction"):
        return True
    from sentry_sdk import tracing_utils

    check: Any = getattr(tracing_utils, "has_span_streaming_enabled", None)  # 2.7x's opt-in
    return bool(check is not None and check(sentry_sdk.get_client().options))


def publish_span(name: str, origin: str) -> AbstractContextManager[Any]:
    """A `queue.publish` span under the current one; none outside a span (nothing to hang it on)."""
    span: AbstractContextManager[Any] = nullcontext()
    if streamed():  # 2.x's sentry_sdk.get_current_span() never sees a streamed span
        if sdk.traces.get_current_span() is not None:
            span = sdk.traces.start_span(name=name, attributes={"sentry.op": PUBLISH_OP, "sentry.origin": origin})
    elif sentry_sdk.get_current_span() is not None:
        span = sdk.start_span(op=PUBLISH_OP, name=name, origin=origin)
    return span


@contextmanager
def job_run(headers: dict[str, Any], name: str, origin: str, sampling: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """The job's transaction (or segment span) continuing the trace of `headers`, named for the
    job, and the `queue.process` span inside it; entered in the job's isolation scope."""
    if streamed():
        sdk.traces.continue_trace(headers)
        sdk.Scope.set_custom_sampling_context(sampling)
        with (sdk.traces.start_span(name=name, parent_span=None, attributes={
                  "sentry.op": TASK_OP, "sentry.origin": origin, "sentry.segment.name.source": "task"}) as segment,
              sdk.traces.start_span(name=name, attributes={"sentry.op": PROCESS_OP, "sentry.origin": origin}) as span):
            yield segment, span
        return
    transaction = sdk.continue_trace(headers, op=TASK_OP, name=name, source="task", origin=origin)
    with (sdk.start_transaction(transaction, custom_sampling_context=sampling),
          sdk.start_span(op=PROCESS_OP, name=name, origin=origin) as span):
        yield transaction, span


def set_data(span: Any, key: str, value: Any) -> None:
    if hasattr(span, "set_attribute"):
        span.set_attribute(key, value)
    else:
        span.set_data(key, value)


def set_outcome(span: Any, outcome: Outcome) -> None:
    if hasattr(span, "set_status"):
        span.set_status(TRANSACTION_STATUS[outcome])
    else:
        span.status = SPAN_STATUS[outcome]


def failure_event(exc: BaseException, mechanism: dict[str, Any]) -> tuple[Any, Any]:
    """Sentry's event and hint for `exc`, built with the client's options (2.x takes them as an
    argument, 3.x reads them itself)."""
    build: Any = utils.event_from_exception
    if not hasattr(sentry_sdk, "start_transaction"):  # 3.x
        built = build(exc, mechanism=mechanism)
    else:
        built = build(exc, client_options=sentry_sdk.get_client().options, mechanism=mechanism)
    event, hint = built
    return event, hint


def may_send_queue_data() -> bool:
    """Whether the user lets Sentry have a job's args: `data_collection`'s `queues` where the
    user set it or the SDK has nothing else (3.x, where it is on unless turned off), else
    `send_default_pii` (2.x before 2.75, or 2.75+ without `data_collection`)."""
    chosen = sentry_sdk.get_client().options.get("data_collection")
    legacy: Any = getattr(sentry_sdk.scope, "should_send_default_pii", None)
    if isinstance(chosen, dict) and (chosen.get("provided_by_user") or legacy is None):
        return bool(chosen.get("queues"))
    return bool(legacy is not None and legacy())
