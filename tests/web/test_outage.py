"""Every route of the dashboard answers within the probes' bound when Redis hangs (a real
redis-server frozen by SIGSTOP), from one handler (`web/outage.py`): a page saying Redis does not
answer for a browser, 503 text for Prometheus' `/metrics`, 503 JSON for the API, 503 for `/health`."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import RedisServer, redis_server_binary
from starlette.testclient import TestClient

from sidequest import Client, Config
from sidequest.web import create_app

BOUND = 3.0  # seconds: the probes' 2 s and some slack; Prometheus gives up after 10
PAGES = ["/", "/busy", "/queues", "/queues/default", "/retries", "/scheduled", "/dead", "/job-metrics", "/tasks",
         "/workflows", "/periodic"]


@pytest.fixture
def frozen():
    """A redis-server of the test's own, and a way to freeze it (thawed after the test)."""
    server = RedisServer(redis_server_binary())
    yield server
    server.proc.send_signal(signal.SIGCONT)
    server.stop()


def timed(http: TestClient, path: str, **headers: str):
    began = time.monotonic()
    answer = http.get(path, headers=headers)
    return answer, time.monotonic() - began


def test_every_route_answers_in_time_when_redis_hangs(frozen):
    http = TestClient(create_app(Client(Config(redis_url=frozen.url(0)))))
    for path in [*PAGES, "/metrics", "/api/stats", "/health"]:
        assert http.get(path).status_code == 200, path  # Redis answering: the routes as ever
    frozen.proc.send_signal(signal.SIGSTOP)
    answer, took = timed(http, "/metrics")
    assert answer.status_code == 503 and took < BOUND, (took, answer.text)
    assert answer.text.startswith("Redis does not answer"), answer.text
    for path in PAGES:
        answer, took = timed(http, path, Accept="text/html")
        assert answer.status_code == 503 and took < BOUND, (path, took)
        assert "Redis does not answer" in answer.text and answer.headers["retry-after"], (path, answer.text)
    answer, took = timed(http, "/api/stats", Accept="application/json")
    assert answer.status_code == 503 and took < BOUND and answer.json()["error"] == "Redis does not answer", took
    answer, took = timed(http, "/health")
    assert answer.status_code == 503 and took < BOUND and answer.json()["status"] == "unavailable", took
    frozen.proc.send_signal(signal.SIGCONT)
    assert http.get("/").status_code == 200  # back once Redis answers
