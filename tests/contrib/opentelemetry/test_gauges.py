"""`sidequest.contrib.opentelemetry.gauges` with the real OpenTelemetry SDK, read back through its
`InMemoryMetricReader`: the retried and dead counters of real workers, and the fleet's gauges
reported by the one process that asks for them (`report_fleet=True`), read from real `sidequest
worker` processes and compared with what `/metrics` tells Prometheus (issue 42 item 4)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import free_port, wait_until
from helpers import ran
from jobs_for_tests import FastBoom, blocker, echo
from scenarios.test_reliability import procs  # noqa: F401  (the fixture)
from starlette.testclient import TestClient
from web.test_prometheus import GATE, YAML, scrape

pytest.importorskip("opentelemetry.sdk", reason="the otel tests need opentelemetry-sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from sidequest import Client
from sidequest.contrib.opentelemetry import SidequestInstrumentor
from sidequest.contrib.opentelemetry.gauges import PLUGIN
from sidequest.web import create_app
from sidequest.worker import lifecycle

FLEET = ("sidequest.queue.size", "sidequest.queue.latency", "sidequest.queue.lanes.waiting", "sidequest.queue.busy",
         "sidequest.queue.capacity", "sidequest.capsule.busy", "sidequest.capsule.capacity")


class Metrics:
    """A meter provider of the test's own with an in-memory reader, and the instrumentor."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.instrumentor = SidequestInstrumentor()

    def collect(self) -> dict[str, dict[tuple[tuple[str, object], ...], float]]:
        """Every point of one collection: by instrument name, then by its sorted attributes."""
        data = self.reader.get_metrics_data()
        return {metric.name: {tuple(sorted(point.attributes.items())): getattr(point, "value", None)
                              for point in metric.data.data_points}
                for resource in (data.resource_metrics if data else []) for scope in resource.scope_metrics
                for metric in scope.metrics}


@pytest.fixture
def metrics():
    found = Metrics()
    yield found
    if found.instrumentor.is_instrumented_by_opentelemetry:
        found.instrumentor.uninstrument()
    assert PLUGIN not in [plugin.name for plugin in lifecycle.registered()]  # the worker's list as it was


def queue(name: str, **more: str) -> tuple[tuple[str, object], ...]:
    return tuple(sorted({"messaging.system": "sidekiq", "messaging.destination.name": name, **more}.items()))


def test_workers_count_the_jobs_they_file_in_retry_and_dead(metrics, client, start):
    metrics.instrumentor.instrument(meter_provider=metrics.provider)
    start()
    client.push(FastBoom, ["otel"])  # retry=2: two retries, then dead
    client.push(echo, ["fine"])
    attributes = queue("default", **{"messaging.sidekiq.job_class": "FastBoom", "error.type": "ValueError"})

    def counted():
        found = metrics.collect()
        return found.get("sidequest.job.dead") == {attributes: 1} and found
    found = wait_until(counted, message="the death counted")
    assert found["sidequest.job.retried"] == {attributes: 2}
    assert not set(FLEET) & set(found)  # a worker reports no fleet-wide gauge unless asked


def test_one_reporting_process_reads_the_fleets_gauges_as_prometheus_does(metrics, procs, r, client,  # noqa: F811
                                                                          tmp_path: Path):
    config = tmp_path / "sidekiq.yml"
    config.write_text(YAML)
    procs("-C", str(config), "--processes", "2")
    wait_until(lambda: r.scard("processes") == 2, 60, message="two worker processes to register")
    for n in range(40):  # laned: 32 staged into queue:saas (8 per group), 8 still waiting in the lanes
        client.push(echo, [n], queue="saas", group=f"tenant-{n % 4}")
    held = {"default": 2, "mail": 1, "ledger": 2}
    for name, count in held.items():
        blocker.set(queue=name, client=client).perform_bulk([[GATE]] * count)
    wait_until(lambda: len(ran(r, "blocker-start")) == 5, 60, message="five jobs to be running")
    metrics.instrumentor.instrument(meter_provider=metrics.provider, report_fleet=True, client=client)
    http = TestClient(create_app(client))

    def busy_everywhere():
        found = metrics.collect()
        return found.get("sidequest.queue.busy", {}).get(queue("ledger")) == 2 and found
    found = wait_until(busy_everywhere, 30, message="the held jobs seen running")
    prometheus = scrape(http)
    assert found["sidequest.queue.busy"] == {queue(q): n for q, n in {**held, "saas": 0}.items()}
    assert found["sidequest.queue.capacity"] == {queue("default"): 6, queue("mail"): 6, queue("ledger"): 2,
                                                 queue("saas"): 0}
    assert found["sidequest.capsule.capacity"] == {(("messaging.system", "sidekiq"), ("sidequest.capsule", c)): n
                                                   for c, n in {"default": 6, "serial": 2}.items()}
    assert found["sidequest.capsule.busy"] == {queue("default", **{"sidequest.capsule": "default"}): 2,
                                               queue("mail", **{"sidequest.capsule": "default"}): 1,
                                               queue("ledger", **{"sidequest.capsule": "serial"}): 2}
    assert found["sidequest.queue.size"][queue("saas")] == prometheus["sidequest_queue_size"][("saas",)] == 32
    assert found["sidequest.queue.lanes.waiting"][queue("saas")] == 8
    assert found["sidequest.queue.latency"][queue("saas")] > 0  # nobody works saas: its oldest job waits
    for name, family in (("sidequest.queue.size", "sidequest_queue_size"),
                         ("sidequest.queue.lanes.waiting", "sidequest_queue_lanes_waiting"),
                         ("sidequest.queue.capacity", "sidequest_queue_capacity")):
        assert {dict(k)["messaging.destination.name"]: v for k, v in found[name].items()} == {
            labels[0]: value for labels, value in prometheus[family].items()}, name
    r.rpush(GATE, *["go"] * 5)  # each held job takes one

    def idle():
        found = metrics.collect()
        return set(found.get("sidequest.queue.busy", {}).values()) == {0} and found
    found = wait_until(idle, 30, message="every queue idle")
    assert found.get("sidequest.capsule.busy", {}) == {}
    metrics.instrumentor.uninstrument()
    assert not set(FLEET) & {name for name, points in metrics.collect().items() if points}  # turned off


def test_a_collection_while_redis_is_away_reports_nothing_with_one_warning(metrics, config, caplog):
    away = Client(config.replace(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    metrics.instrumentor.instrument(meter_provider=metrics.provider, report_fleet=True, client=away)
    with caplog.at_level(logging.WARNING, logger="sidequest.contrib.opentelemetry.gauges"):
        first = metrics.collect()
        metrics.collect()
    assert not set(FLEET) & {name for name, points in first.items() if points}
    warnings = [record.getMessage() for record in caplog.records if record.name.endswith("gauges")]
    assert warnings == ["sidequest gauges: Redis did not answer (RedisUnavailableError); "
                        "nothing reported until it does"]
