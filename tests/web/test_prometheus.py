"""`/metrics`' autoscaling signals (issue 32 item 2): per queue, the jobs running now and the
slots that fetch from it, and the same per capsule, read from real `sidequest worker`
processes (a supervisor's two children, each with two capsules) whose jobs the test holds
running, then lets go."""

from __future__ import annotations

from pathlib import Path

from conftest import wait_until
from helpers import ran
from jobs_for_tests import blocker
from prometheus_client.parser import text_string_to_metric_families
from scenarios.test_reliability import procs  # noqa: F401  (the fixture)
from starlette.testclient import TestClient

from sidequest.web import create_app

# Two capsules: the default one (the process's queues, -c 3 per process) and "serial" (ledger,
# 2 threads for the whole group: 1+1 over two children).
YAML = """\
:concurrency: 3
:queues: [default, mail]
:capsules:
  :serial:
    :queues: [ledger]
    :concurrency: 2
"""
GATE = "test:gate"


def scrape(http: TestClient) -> dict[str, dict[tuple[str, ...], float]]:
    """Every sample of /metrics, by family name, then by its label values in label-name order."""
    response = http.get("/metrics")
    assert response.status_code == 200
    return {family.name: {tuple(v for _, v in sorted(s.labels.items())): s.value for s in family.samples}
            for family in text_string_to_metric_families(response.text)}


def test_metrics_show_busy_and_capacity_per_queue_and_capsule(procs, r, client, tmp_path: Path):  # noqa: F811
    config = tmp_path / "sidekiq.yml"
    config.write_text(YAML)
    procs("-C", str(config), "--processes", "2")
    wait_until(lambda: r.scard("processes") == 2, 60, message="two worker processes to register")
    client.push(blocker, ["elsewhere"], queue="elsewhere")  # a queue no process works
    held = {"default": 2, "mail": 1, "ledger": 2}
    for queue, count in held.items():
        blocker.set(queue=queue, client=client).perform_bulk([[GATE]] * count)
    wait_until(lambda: len(ran(r, "blocker-start")) == 5, 60, message="five jobs to be running")
    http = TestClient(create_app(client))
    expected_busy = {("default",): 2.0, ("mail",): 1.0, ("ledger",): 2.0, ("elsewhere",): 0.0}

    def busy() -> dict[tuple[str, ...], float]:
        return scrape(http).get("sidequest_queue_busy", {})
    wait_until(lambda: busy() == expected_busy, 30, message=f"queue busy {expected_busy}: {busy()}")
    families = scrape(http)
    # capacity: 3 threads in each of the two children for default and mail, 1+1 for ledger
    assert families["sidequest_queue_capacity"] == {("default",): 6.0, ("mail",): 6.0, ("ledger",): 2.0,
                                                    ("elsewhere",): 0.0}
    assert families["sidequest_capsule_capacity"] == {("default",): 6.0, ("serial",): 2.0}
    # labels in name order: (capsule, queue)
    assert families["sidequest_capsule_busy"] == {("default", "default"): 2.0, ("default", "mail"): 1.0,
                                                  ("serial", "ledger"): 2.0}
    assert families["sidequest_busy"] == {(): 5.0} and families["sidequest_concurrency"] == {(): 8.0}
    assert families["sidequest_queue_size"][("elsewhere",)] == 1.0

    r.rpush(GATE, *["go"] * 5)  # each held job takes one
    idle = {("default",): 0.0, ("mail",): 0.0, ("ledger",): 0.0, ("elsewhere",): 0.0}
    wait_until(lambda: busy() == idle, 30, message=f"every queue idle: {busy()}")
    assert scrape(http)["sidequest_capsule_busy"] == {}


def round_trips(http: TestClient, monkeypatch) -> int:
    """What one scrape sends Redis, counted as redis-py's sends (a pipeline is one)."""
    import redis.connection

    sent = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        sent.append(1)
        return original(self, command, check_health)
    with monkeypatch.context() as patch:
        patch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
        assert http.get("/metrics").status_code == 200
    return len(sent)


def test_a_scrape_takes_as_many_round_trips_for_forty_processes_as_for_one(client, r, monkeypatch):
    """Busy and capacity are read in pipelines: the round trips of a scrape do not grow with the
    processes (or queues) it reads."""
    import json
    import time

    def register(n: int) -> None:
        for i in range(n):
            identity = f"host:{i}:x"
            info = {"concurrency": 5, "capsules": {"default": {"concurrency": 5, "mode": "strict",
                                                               "weights": {f"q{i}": 0}}}}
            r.sadd("processes", identity)
            r.sadd("queues", f"q{i}")
            r.hset(identity, mapping={"info": json.dumps(info), "busy": 1, "beat": time.time(), "quiet": "false"})
            r.hset(f"{identity}:work", "t", json.dumps({"queue": f"q{i}", "payload": "{}", "run_at": 1}))
    http = TestClient(create_app(client))
    http.get("/metrics")  # the scripts and connections a first scrape sets up
    register(1)
    one = round_trips(http, monkeypatch)
    register(40)
    assert round_trips(http, monkeypatch) == one
    assert scrape(http)["sidequest_queue_busy"][("q39",)] == 1.0


def test_jobs_waiting_in_a_queues_lanes_are_a_series_of_their_own(client, r):
    """A laned job not yet staged is in neither the queue's size nor its latency: an autoscaler
    reads it from sidequest_queue_lanes_waiting."""
    for n in range(40):
        client.push("Echo", [n], queue="saas", group=f"tenant-{n % 4}")
    client.push("Echo", ["plain"], queue="other")
    samples = scrape(TestClient(create_app(client)))
    assert samples["sidequest_queue_size"][("saas",)] == 32.0  # staged: the rest wait in their lanes
    assert samples["sidequest_queue_lanes_waiting"] == {("other",): 0.0, ("saas",): 8.0}
