"""`sidequest.contrib.opentelemetry` with the real OpenTelemetry SDK: spans read from its
in-memory exporter, metrics from its in-memory reader, jobs run by real workers (in this process,
a `sidequest worker` subprocess, and pushed by real Ruby Sidekiq)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess

import pytest
from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until
from helpers import WorkerProcess, queue_items

pytest.importorskip("opentelemetry.sdk", reason="the otel tests need opentelemetry-sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sidequest
from sidequest.contrib.opentelemetry import ConsumerHook, ProducerHook, SidequestInstrumentor
from sidequest.jobs.middleware import PROCESS_CLIENT, PROCESS_SERVER


@sidequest.job(name="OtelOk")
def otel_ok(value):
    return value


@sidequest.job(name="OtelBoom", retry=3)
def otel_boom():
    raise ValueError("kaput")


class Telemetry:
    """An SDK tracer provider and meter provider of the test's own (the global ones can be set
    only once per process), with in-memory readers."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.instrumentor = SidequestInstrumentor()

    def instrument(self, style: str | None = None) -> None:
        options = {} if style is None else {"propagation_style": style}
        self.instrumentor.instrument(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
                                     **options)

    def finished(self, kind: SpanKind, count: int = 1) -> list:
        def found():
            spans = [s for s in self.spans.get_finished_spans() if s.kind == kind]
            return spans if len(spans) >= count else None
        return wait_until(found, STARTUP, message=f"{count} {kind.name} span(s)")

    def points(self, name: str) -> list:
        data = self.metrics.get_metrics_data()
        return [point for resource in (data.resource_metrics if data else []) for scope in resource.scope_metrics
                for metric in scope.metrics if metric.name == name for point in metric.data.data_points]


@pytest.fixture
def otel():
    telemetry = Telemetry()
    yield telemetry
    if telemetry.instrumentor.is_instrumented_by_opentelemetry:
        telemetry.instrumentor.uninstrument()
    assert not hooks(PROCESS_CLIENT) and not hooks(PROCESS_SERVER)


def hooks(chain) -> list:
    """This integration's links in a chain (other integrations may have links of their own)."""
    return [link for link in chain if isinstance(link, (ProducerHook, ConsumerHook))]


def traceparent(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def push_in_a_request(otel, client, job, args):
    """Push from inside a span, as a web request would; return (the request span, the jid)."""
    with otel.tracer_provider.get_tracer("test").start_as_current_span("GET /signup") as request:
        jid = client.push(job, args)
    return request, jid


def test_child_style_makes_one_trace_from_the_request_through_the_push_to_the_run(otel, client, start, r):
    otel.instrument("child")
    request, jid = push_in_a_request(otel, client, otel_ok, [1])
    [producer] = otel.finished(SpanKind.PRODUCER)
    [payload] = queue_items(r)
    assert payload["traceparent"] == traceparent(producer)  # a top-level key, as Ruby's middleware writes it
    start()
    [consumer] = otel.finished(SpanKind.CONSUMER)
    assert producer.name == "default publish" and consumer.name == "default process"
    assert producer.parent.span_id == request.get_span_context().span_id
    assert consumer.parent.span_id == producer.get_span_context().span_id
    assert {producer.context.trace_id, consumer.context.trace_id} == {request.get_span_context().trace_id}
    assert dict(consumer.attributes) == {
        "messaging.system": "sidekiq", "messaging.destination.name": "default", "messaging.message.id": jid,
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.sidekiq.job_class": "OtelOk"}
    assert producer.attributes["messaging.operation.type"] == "send"
    assert consumer.status.status_code == StatusCode.UNSET and not consumer.links


def test_link_style_is_the_default_and_starts_a_new_trace_linked_to_the_push(otel, client, start):
    otel.instrument()
    push_in_a_request(otel, client, otel_ok, [1])
    [producer] = otel.finished(SpanKind.PRODUCER)
    start()
    [consumer] = otel.finished(SpanKind.CONSUMER)
    assert consumer.parent is None and consumer.context.trace_id != producer.context.trace_id
    [link] = consumer.links
    assert (link.context.trace_id, link.context.span_id) == (producer.context.trace_id, producer.context.span_id)


def test_none_style_neither_parents_nor_links(otel, client, start):
    otel.instrument("none")
    push_in_a_request(otel, client, otel_ok, [1])
    [producer] = otel.finished(SpanKind.PRODUCER)
    start()
    [consumer] = otel.finished(SpanKind.CONSUMER)
    assert consumer.parent is None and not consumer.links
    assert consumer.context.trace_id != producer.context.trace_id


def test_a_failure_sets_error_status_records_the_exception_and_is_counted(otel, client, start):
    otel.instrument()
    client.push(otel_ok, [1])
    client.push(otel_boom, [])
    start()
    spans = otel.finished(SpanKind.CONSUMER, 2)
    failed = next(s for s in spans if s.attributes["messaging.sidekiq.job_class"] == "OtelBoom")
    assert failed.status.status_code == StatusCode.ERROR and failed.status.description == "ValueError: kaput"
    assert failed.attributes["error.type"] == "ValueError"
    [event] = failed.events
    assert event.name == "exception" and event.attributes["exception.message"] == "kaput"
    consumed = {p.attributes.get("error.type"): p.value for p in otel.points("messaging.client.consumed.messages")}
    assert consumed == {None: 1, "ValueError": 1}
    durations = otel.points("messaging.process.duration")
    assert sum(p.count for p in durations) == 2 and all(p.attributes["messaging.system"] == "sidekiq"
                                                         for p in durations)
    sent = {p.attributes["messaging.sidekiq.job_class"]: p for p in otel.points("messaging.client.sent.messages")}
    assert {name: p.value for name, p in sent.items()} == {"OtelOk": 1, "OtelBoom": 1}
    assert sent["OtelOk"].attributes["messaging.destination.name"] == "default"


def test_a_retried_job_carries_its_retry_count_and_its_original_parent(otel, start, r):
    otel.instrument("child")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    retried = {"class": "OtelOk", "args": [2], "queue": "default", "jid": "a" * 24, "retry": True,
               "retry_count": 2, "created_at": 1.0, "enqueued_at": 2.0, "traceparent": parent}
    r.lpush("queue:default", json.dumps(retried))
    start()
    [consumer] = otel.finished(SpanKind.CONSUMER)
    assert consumer.attributes["messaging.sidekiq.retry_count"] == 2
    assert f"{consumer.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{consumer.parent.span_id:016x}" == "b7ad6b7169203331"


def test_uninstrument_takes_the_hooks_out_and_instrument_puts_them_back(otel, client, r):
    otel.instrument()
    otel.instrumentor.uninstrument()
    assert not hooks(client.config.client_middleware)
    client.push(otel_ok, [1])
    assert "traceparent" not in queue_items(r)[0] and not otel.spans.get_finished_spans()
    SidequestInstrumentor().instrument(tracer_provider=otel.tracer_provider)  # the same (single) instrumentor
    assert len(hooks(client.config.client_middleware)) == 1
    client.push(otel_ok, [2])
    assert "traceparent" in queue_items(r)[0]


def test_an_unknown_propagation_style_is_refused(otel):
    with pytest.raises(ValueError, match="propagation_style must be one of link, child, none; got 'parent'"):
        otel.instrument("parent")
    assert not otel.instrumentor.is_instrumented_by_opentelemetry and not hooks(PROCESS_SERVER)


# A client middleware writing what opentelemetry-instrumentation-sidekiq's writes into the job
# hash (W3C keys at the top level), on Ruby Sidekiq's own client.
RUBY_PUSH = """
require "sidekiq"
class TraceContext
  def call(_worker_class, job, _queue, _redis_pool)
    job["traceparent"] = ENV.fetch("TRACEPARENT")
    job["tracestate"] = "ruby=1"
    yield
  end
end
Sidekiq.configure_client { |config| config.client_middleware { |chain| chain.add TraceContext } }
puts Sidekiq::Client.push("class" => "OtelOk", "args" => [7], "queue" => "default")
"""


def test_a_job_pushed_by_ruby_sidekiq_runs_as_a_child_of_its_traceparent(ruby, otel, start, r, redis_url):
    otel.instrument("child")
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    out = subprocess.run([ruby, "-e", RUBY_PUSH], env={**os.environ, "REDIS_URL": redis_url, "TRACEPARENT": parent},
                         capture_output=True, text=True, timeout=2 * STARTUP)
    assert out.returncode == 0, out.stderr
    jid = out.stdout.strip().splitlines()[-1]
    assert queue_items(r)[0]["traceparent"] == parent
    start()
    [consumer] = otel.finished(SpanKind.CONSUMER)
    assert consumer.attributes["messaging.message.id"] == jid
    assert f"{consumer.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert f"{consumer.parent.span_id:016x}" == "00f067aa0ba902b7" and consumer.parent.is_remote
    assert consumer.context.trace_state.get("ruby") == "1"


@pytest.mark.parametrize("style", ["child", "link"])
def test_a_sidequest_worker_process_continues_the_trace_of_a_push_from_this_process(otel, client, r, redis_url,
                                                                                    tmp_path, monkeypatch, style):
    otel.instrument()
    request, ok = push_in_a_request(otel, client, "OtelCross", [False])
    failed = client.push("OtelCross", [True])
    producers = {s.attributes["messaging.message.id"]: s for s in otel.finished(SpanKind.PRODUCER, 2)}
    spans_file = tmp_path / "spans.jsonl"
    spans_file.touch()
    # the worker's own tracer provider and style (see otel_worker), through its environment
    monkeypatch.setenv("OTEL_SPANS_FILE", str(spans_file))
    monkeypatch.setenv("OTEL_PROPAGATION_STYLE", style)
    worker = WorkerProcess(redis_url, "-r", "otel_worker")
    try:
        def consumers():
            assert worker.proc.poll() is None, worker.output
            spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
            found = {s["attributes"]["messaging.message.id"]: s for s in spans if s["kind"] == "CONSUMER"}
            return found if len(found) == 2 else None
        spans = wait_until(consumers, STARTUP, message="the worker process's two consumer spans")
    finally:
        worker.stop()
    producer = producers[ok].get_span_context()
    pushed = (f"{producer.trace_id:032x}", f"{producer.span_id:016x}")
    if style == "child":
        assert (spans[ok]["trace_id"], spans[ok]["parent_id"]) == pushed
        assert spans[ok]["trace_id"] == f"{request.get_span_context().trace_id:032x}"
    else:
        assert spans[ok]["parent_id"] is None and spans[ok]["links"] == ["-".join(pushed)]
    assert spans[ok]["name"] == "default process" and spans[ok]["status"] == "UNSET"
    assert spans[failed]["status"] == "ERROR" and spans[failed]["attributes"]["error.type"] == "RuntimeError"
    assert "exception" in spans[failed]["events"]


# -- the guide -----------------------------------------------------------------------------------
def guide_section(title: str) -> str:
    """The Python blocks of one section of docs/integrations-observability.md, as one script."""
    text = (ROOT / "docs" / "integrations-observability.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))


def test_the_guides_opentelemetry_snippets_run_as_written(r, redis_url):
    script = guide_section("OpenTelemetry")
    out = subprocess.run([PYTHON, "-c", script], env=python_env(REDIS_URL=redis_url), capture_output=True,
                         text=True, timeout=2 * STARTUP)
    assert out.returncode == 0, out.stderr
    spans = json.loads("[" + out.stdout.replace("}\n{", "},\n{") + "]")  # the console exporter's spans
    assert [(s["name"], s["kind"]) for s in spans] == [("mail publish", "SpanKind.PRODUCER"),
                                                       ("POST /signup", "SpanKind.INTERNAL")]
    [payload] = queue_items(r, "mail")
    assert payload["traceparent"].split("-")[1:3] == [spans[0]["context"]["trace_id"][2:],
                                                      spans[0]["context"]["span_id"][2:]]


@pytest.mark.skipif(importlib.util.find_spec("redis.observability") is None,
                    reason="redis-py before 7.2 has no metrics of its own (redis.observability)")
def test_redis_pys_own_metrics_still_work_after_sidequest_is_imported(redis_url):
    """sidequest keeps the OpenTelemetry SDK out of redis-py's import (`sidequest._import_redis`,
    3 MB of every worker's RSS): the SDK stays importable, and redis-py's own metrics, turned on
    after `import sidequest`, record what they record without it."""
    script = f"""
import sys
first = sys.argv[1] == "sidequest"
if first:
    import sidequest
    assert "opentelemetry.sdk.metrics" not in sys.modules
import redis
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from redis.observability import MetricGroup, OTelConfig, get_observability_instance
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
get_observability_instance().init(OTelConfig(metric_groups=[MetricGroup.COMMAND, MetricGroup.CONNECTION_BASIC]))
client = redis.Redis.from_url({redis_url!r})
for i in range(3):
    client.set("otel:check", i)
data = reader.get_metrics_data()
print(sorted({{m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}}))
"""
    seen = [subprocess.run([PYTHON, "-c", script, first], capture_output=True, text=True, timeout=60,
                           env=python_env()) for first in ("sidequest", "redis")]
    for run in seen:
        assert run.returncode == 0, run.stderr
    assert seen[0].stdout == seen[1].stdout and "[]" not in seen[0].stdout
