"""Loaded by a `sidequest worker` subprocess with `-r otel_worker`: the worker's own tracer
provider, writing each finished span as one JSON line to $OTEL_SPANS_FILE, then
`SidequestInstrumentor().instrument()` with the style in $OTEL_PROPAGATION_STYLE, as an
application's start-up module would do it. Defines the job the tests push to it by name."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import sidequest
from sidequest.contrib.opentelemetry import SidequestInstrumentor


def span_record(span: ReadableSpan) -> dict:
    """What the tests read of a span: its ids in W3C hex, and what it says."""
    context, parent = span.get_span_context(), span.parent
    return {
        "name": span.name, "kind": span.kind.name, "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}", "parent_id": f"{parent.span_id:016x}" if parent else None,
        "status": span.status.status_code.name, "attributes": dict(span.attributes or {}),
        "links": [f"{link.context.trace_id:032x}-{link.context.span_id:016x}" for link in span.links],
        "events": [event.name for event in span.events],
    }


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()  # processor threads end spans at the same time

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(span_record(span)) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["OTEL_SPANS_FILE"])))
trace.set_tracer_provider(provider)
SidequestInstrumentor().instrument(propagation_style=os.environ.get("OTEL_PROPAGATION_STYLE", "link"))


@sidequest.job(name="OtelCross")
def otel_cross(fail: bool) -> None:
    if fail:
        raise RuntimeError("failed on purpose")
