"""`sidequest.contrib.sentry` with the real Sentry SDK, sending through a transport of the test's
own (`sentry_transport`: nothing leaves the machine); jobs run by real workers, in this process
and in a `sidequest worker` subprocess. The same tests run on sentry-sdk 2 (transactions) and 3
(streamed spans, read back as transactions by `sentry_transport`); where the SDKs differ (the
statuses a streamed span can have, the privacy switches), the test says which it expects."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from conftest import PYTHON, ROOT, STARTUP, free_port, python_env, wait_until
from helpers import WorkerProcess, queue_items

sentry_sdk = pytest.importorskip("sentry_sdk", reason="the sentry tests need sentry-sdk")

from sentry_transport import MemoryTransport, sent_transactions  # noqa: E402

import sidequest  # noqa: E402
from sidequest.contrib.sentry import SidequestIntegration, will_retry  # noqa: E402
from sidequest.errors import Cancelled, JobFailed  # noqa: E402

STREAMED = not hasattr(sentry_sdk, "start_transaction")  # sentry-sdk 3: spans, no transactions
# sentry-sdk 2.7x streams spans too when asked (trace_lifecycle="stream"): the tracing tests run both ways
LIFECYCLES = ["stream"] if STREAMED else ["transactions", "stream"] if hasattr(
    sentry_sdk.tracing_utils, "has_span_streaming_enabled") else ["transactions"]
LEGACY_PII = hasattr(sentry_sdk.scope, "should_send_default_pii")  # send_default_pii: sentry-sdk 2 only
DATA_COLLECTION = STREAMED or tuple(int(n) for n in sentry_sdk.VERSION.split(".")[:2]) >= (2, 75)


def status(outcome: str, lifecycle: str) -> str:
    """A job's transaction status: a streamed span's is "ok" or "error" alone."""
    if lifecycle == "stream":
        return "error" if outcome == "failed" else "ok"
    return {"failed": "internal_error", "stopped": "cancelled"}[outcome]


@pytest.fixture(params=LIFECYCLES)
def lifecycle(request) -> str:
    return request.param


def request_span(name: str, lifecycle: str):
    """A request's span, as a web framework integration would start it."""
    if lifecycle == "stream":
        return sentry_sdk.traces.start_span(name=name, attributes={"sentry.op": "http.server"})
    return sentry_sdk.start_transaction(name=name, op="http.server")


def queue_data(allowed: bool) -> dict:
    """The init options that let Sentry have (or not) a job's args, in this SDK's words."""
    if DATA_COLLECTION:
        return {"data_collection": {"queues": allowed}}
    return {"send_default_pii": allowed}


@sidequest.job(name="SentryBoom", retry=3)
def sentry_boom(secret, n):
    raise ValueError(f"boom {n}")


@sidequest.job(name="SentryOk")
def sentry_ok(n):
    return n


@sidequest.job(name="SentryFlaky", retry=3)
def sentry_flaky(error):
    raise {"timeout": TimeoutError, "value": ValueError, "cancel": Cancelled}[error](error)


@pytest.fixture
def sentry():
    """`sentry(sdk={...}, **integration_options)` starts Sentry with the integration (and no
    other, so nothing else is patched for the rest of the session); returns the transport."""
    def init(sdk: dict | None = None, lifecycle: str = LIFECYCLES[0], **options) -> MemoryTransport:
        transport = MemoryTransport()
        if lifecycle == "stream" and not STREAMED:
            sdk = {**(sdk or {}), "trace_lifecycle": "stream"}
        sentry_sdk.init(transport=transport, traces_sample_rate=1.0,
                        default_integrations=False, auto_enabling_integrations=False,
                        integrations=[SidequestIntegration(**options)], **(sdk or {}))
        return transport
    yield init
    sentry_sdk.get_global_scope().set_client(None)  # the integration's links go quiet again


def transactions(transport, count):
    return wait_until(lambda: len(transport.of("transaction")) >= count and transport.of("transaction"),
                      STARTUP, message=f"{count} transaction(s)")


def raw_job(jid, error, **fields):
    return json.dumps({"class": "SentryFlaky", "args": [error], "queue": "default", "jid": jid, "retry": True,
                       "created_at": 1.0, "enqueued_at": 2.0, **fields})


def test_a_failing_job_is_reported_once_with_its_job_and_a_transaction(sentry, client, start, lifecycle):
    transport = sentry(sdk=queue_data(True), lifecycle=lifecycle)
    jid = client.push(sentry_boom, ["s3cret", 7])
    start()
    [transaction] = transactions(transport, 1)
    [event] = transport.of("event")
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ValueError", "boom 7")
    assert (exception["mechanism"]["type"], exception["mechanism"]["handled"]) == ("sidequest", False)
    assert {k: v for k, v in event["tags"].items() if k.startswith("sidequest_")} == {
        "sidequest_job": "SentryBoom", "sidequest_jid": jid, "sidequest_queue": "default"}
    assert event["contexts"]["sidequest"] == {"class": "SentryBoom", "jid": jid, "queue": "default",
                                              "retry_count": None, "args": ["s3cret", 7]}
    assert event["contexts"]["trace"]["trace_id"] == transaction["contexts"]["trace"]["trace_id"]
    trace = transaction["contexts"]["trace"]
    assert (transaction["transaction"], transaction["transaction_info"], trace["op"], trace["status"]) == (
        "SentryBoom", {"source": "task"}, "queue.task.sidequest", status("failed", lifecycle))
    [process] = transaction["spans"]
    assert process["op"] == "queue.process" and process["data"]["messaging.message.id"] == jid
    assert process["data"]["messaging.destination.name"] == "default"
    assert process["data"]["messaging.message.receive.latency"] >= 0


def test_args_are_filtered_unless_data_collection_allows_queues(sentry, client, start):
    transport = sentry(sdk={} if not STREAMED else queue_data(False))  # sentry-sdk 3 collects queue data by default
    client.push(sentry_boom, ["s3cret", 1])
    start()
    transactions(transport, 1)
    assert transport.of("event")[0]["contexts"]["sidequest"]["args"] == "[Filtered]"


@pytest.mark.skipif(not LEGACY_PII, reason="sentry-sdk 3 has no send_default_pii (data_collection replaced it)")
@pytest.mark.filterwarnings("ignore:The send_default_pii option is deprecated:DeprecationWarning")
def test_send_default_pii_still_allows_args(sentry, client, start):
    transport = sentry(sdk={"send_default_pii": True})  # the switch before data_collection
    client.push(sentry_boom, ["s3cret", 1])
    start()
    transactions(transport, 1)
    assert transport.of("event")[0]["contexts"]["sidequest"]["args"] == ["s3cret", 1]


def test_a_retry_carries_its_retry_count_and_long_args_are_trimmed_by_sentry(sentry, start, r):
    transport = sentry(sdk={**queue_data(True), "max_value_length": 200})
    r.lpush("queue:default", raw_job("b" * 24, "value", retry_count=1))
    r.lpush("queue:default", json.dumps({"class": "SentryBoom", "args": ["y" * 5000, 2], "queue": "default",
                                         "jid": "c" * 24, "retry": True, "retry_count": 4}))
    start()
    transactions(transport, 2)
    events = {e["tags"]["sidequest_jid"]: e for e in transport.of("event")}
    assert events["b" * 24]["contexts"]["sidequest"]["retry_count"] == 1
    long_arg = events["c" * 24]["contexts"]["sidequest"]["args"][0]
    assert long_arg.startswith("yyy") and len(long_arg) <= 200  # Sentry's serializer trims it, as any value


def test_each_job_gets_a_transaction_and_a_success_reports_nothing(sentry, client, start):
    transport = sentry()
    client.push_bulk(sentry_ok, [[1], [2]])
    start()
    found = transactions(transport, 2)
    assert {t["contexts"]["trace"]["status"] for t in found} == {"ok"} and not transport.of("event")
    assert len({t["contexts"]["trace"]["span_id"] for t in found}) == 2


def test_expected_failures_are_quiet_until_their_retries_run_out(sentry, start, r):
    transport = sentry(ignore_retries_of=(TimeoutError,))
    r.lpush("queue:default", raw_job("1" * 24, "timeout", retry=3))  # 3 retries ahead: quiet
    r.lpush("queue:default", raw_job("2" * 24, "timeout", retry=3, retry_count=2))  # its last attempt: reported
    r.lpush("queue:default", raw_job("3" * 24, "value", retry=3))  # not expected: reported
    start()
    transactions(transport, 3)
    assert sorted(e["tags"]["sidequest_jid"] for e in transport.of("event")) == ["2" * 24, "3" * 24]


def test_report_after_job_retries_quiets_every_failure_that_will_be_retried(sentry, start, r):
    transport = sentry(report_after_job_retries=True, max_retries=1)
    r.lpush("queue:default", raw_job("4" * 24, "value"))  # retry=True is one retry here: quiet
    r.lpush("queue:default", raw_job("5" * 24, "value", retry_count=0))  # that retry failed: reported
    r.lpush("queue:default", raw_job("6" * 24, "value", retry=False))  # dropped on failure: reported
    start()
    transactions(transport, 3)
    assert sorted(e["tags"]["sidequest_jid"] for e in transport.of("event")) == ["5" * 24, "6" * 24]


def test_a_job_that_cancels_itself_is_not_an_error(sentry, client, start, lifecycle):
    transport = sentry(lifecycle=lifecycle)
    client.push(sentry_flaky, ["cancel"])
    start()
    [transaction] = transactions(transport, 1)
    assert transaction["contexts"]["trace"]["status"] == status("stopped", lifecycle) and not transport.of("event")


def test_a_push_in_a_transaction_gets_a_publish_span_and_the_job_continues_its_trace(sentry, client, start, r,
                                                                                     lifecycle):
    transport = sentry(lifecycle=lifecycle)
    with request_span("POST /signup", lifecycle):
        jid = client.push(sentry_ok, [1])
    [request] = transactions(transport, 1)
    [publish] = request["spans"]
    assert (publish["op"], publish["description"], publish["data"]["messaging.message.id"]) == (
        "queue.publish", "SentryOk", jid)
    headers = queue_items(r)[0]["trace_propagation_headers"]  # the key sentry-ruby's Sidekiq middleware uses
    assert headers["sentry-trace"].startswith(f"{request['contexts']['trace']['trace_id']}-{publish['span_id']}")
    start()
    job = wait_until(lambda: [t for t in transport.of("transaction") if t["transaction"] == "SentryOk"],
                     STARTUP, message="the job's transaction")[0]["contexts"]["trace"]
    assert (job["trace_id"], job["parent_span_id"]) == (request["contexts"]["trace"]["trace_id"], publish["span_id"])


def test_without_an_active_sentry_client_the_links_do_nothing(sentry, client, r):
    sentry()
    sentry_sdk.get_global_scope().set_client(None)
    client.push(sentry_ok, [1])
    assert "trace_propagation_headers" not in queue_items(r)[0]


def test_will_retry_follows_the_retriers_rule():
    assert will_retry({"retry": True}, ValueError(), 25)
    assert not will_retry({"retry": True, "retry_count": 24}, ValueError(), 25)
    assert will_retry({"retry": 2, "retry_count": 0}, ValueError(), 25)
    assert not will_retry({"retry": 0}, ValueError(), 25)
    assert not will_retry({"retry": False}, ValueError(), 25)
    assert not will_retry({"retry": True}, JobFailed("business"), 25)


def test_a_sidequest_worker_process_reports_each_failure_once_with_default_integrations(r, redis_url, client,
                                                                                         tmp_path, monkeypatch):
    events_file = tmp_path / "events.jsonl"
    events_file.touch()
    monkeypatch.setenv("SENTRY_EVENTS_FILE", str(events_file))
    quiet = client.push("SentryCross", ["timeout"])  # expected, with retries ahead: quiet
    loud = client.push("SentryCross", ["value"])
    worker = WorkerProcess(redis_url, "-r", "sentry_worker")
    try:
        def sent():
            assert worker.proc.poll() is None, worker.output
            items = [json.loads(line) for line in events_file.read_text().splitlines()]
            return items if len(sent_transactions(items)) == 2 else None
        items = wait_until(sent, STARTUP, message="two job transactions from the worker process")
    finally:
        worker.stop()
    events = [body for kind, body in items if kind == "event"]
    assert [e["tags"]["sidequest_jid"] for e in events] == [loud], worker.output
    assert events[0]["exception"]["values"][-1]["type"] == "ValueError" and quiet != loud


def test_the_guides_sentry_snippets_run_as_written(r, redis_url):
    text = (ROOT / "docs" / "integrations-observability.md").read_text(encoding="utf-8")
    section = text.split("\n## Sentry\n", 1)[1].split("\n## ", 1)[0]
    script = "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))
    # a DSN on a closed local port: the SDK runs for real, and nothing leaves the machine
    dsn = f"http://public@127.0.0.1:{free_port()}/1"
    out = subprocess.run([PYTHON, "-c", script], env=python_env(REDIS_URL=redis_url, SENTRY_DSN=dsn),
                         capture_output=True, text=True, timeout=2 * STARTUP)
    assert out.returncode == 0, out.stderr
    [payload] = queue_items(r, "mail")
    assert set(payload["trace_propagation_headers"]) == {"sentry-trace", "baggage"}
