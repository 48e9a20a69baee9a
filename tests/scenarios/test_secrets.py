"""No credential of the Redis URL leaves the process: not in a real `sidequest worker`'s log lines,
its `/live` and `/ready` bodies, the dashboard's pages and `/health`, nor the CLI's output, for a
password given as `?password=` or as a Sentinel's `?sentinel_password=` (the other forms:
tests/store/test_redaction.py). A probe body names no URL at all."""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner
from conftest import PYTHON, STARTUP, RedisServer, free_port, python_env, redis_server_binary, wait_until
from helpers import WorkerProcess, http_get
from starlette.testclient import TestClient

from sidequest import Client, Config
from sidequest.cli import main
from sidequest.web import create_app

SECRET = "Sq-s3cret-Pa55"
PAGES = ["/", "/busy", "/queues", "/retries", "/scheduled", "/dead", "/job-metrics", "/tasks", "/workflows",
         "/periodic", "/metrics", "/api/stats"]


@pytest.fixture
def locked_redis():
    """A redis-server of the test's own that asks for SECRET."""
    server = RedisServer(redis_server_binary(), ["--requirepass", SECRET])
    yield server
    server.stop()




def test_a_worker_shows_no_password_in_its_log_or_its_probes(locked_redis, tmp_path):
    url = f"redis://127.0.0.1:{locked_redis.port}/0?password={SECRET}"
    port = free_port()
    worker = WorkerProcess(url, "--health-port", str(port), "--health-host", "127.0.0.1",
                           env={"SIDEQUEST_HEALTH_DIR": str(tmp_path)})
    try:
        wait_until(lambda: http_get(port, "/ready")[0] == 200, STARTUP, 0.1, "the worker to be ready")
        bodies = [http_get(port, "/live")[1], http_get(port, "/ready")[1]]
        locked_redis.halt()
        wait_until(lambda: http_get(port, "/ready")[0] == 503, STARTUP, 0.1, "readiness to fail")
        bodies.append(http_get(port, "/ready")[1])
    finally:
        output = worker.stop()
    assert "redis=redis://127.0.0.1" in output, output  # the start line names the URL, masked
    assert SECRET not in output, output
    for body in bodies:
        assert SECRET not in body and "redis://" not in body and body.count("\n") == 1, body
    assert bodies[2].startswith("unhealthy: cannot reach Redis: "), bodies[2]


@pytest.mark.parametrize("url", [f"redis+sentinel://127.0.0.1:{{port}}/mymaster/0?sentinel_password={SECRET}",
                                 f"redis://127.0.0.1:{{port}}/0?password={SECRET}"], ids=["sentinel", "redis"])
def test_a_worker_that_cannot_reach_redis_says_so_without_the_password(url):
    url = url.format(port=free_port())  # nothing listens there
    done = subprocess.run([PYTHON, "-m", "sidequest.cli", "worker", "-r", "jobs_for_tests"], capture_output=True,
                          text=True, timeout=STARTUP, env=python_env(REDIS_URL=url))
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "cannot reach Redis at " in said, said
    assert SECRET not in said and "Traceback" not in said, said


@pytest.mark.parametrize("kind", ["password", "sentinel_password"])
def test_the_cli_shows_no_password(kind):
    scheme = "redis+sentinel" if kind == "sentinel_password" else "redis"
    path = "/mymaster/0" if kind == "sentinel_password" else "/0"
    url = f"{scheme}://127.0.0.1:{free_port()}{path}?{kind}={SECRET}"
    for args in (["stats"], ["health", "--ready", "--timeout", "1"], ["queues"]):
        result = CliRunner().invoke(main, [*args, "--redis-url", url])
        assert result.exit_code != 0 and result.output.strip(), (args, result.output)
        assert SECRET not in result.output and "Traceback" not in result.output, (args, result.output)


def test_the_dashboard_shows_no_password(locked_redis):
    url = f"redis://127.0.0.1:{locked_redis.port}/0?password={SECRET}"
    http = TestClient(create_app(Client(Config(redis_url=url))))
    for path in PAGES:
        answer = http.get(path, headers={"Accept": "text/html"})
        assert answer.status_code == 200 and SECRET not in answer.text, (path, answer.text[-500:])
    assert "?password=****" in http.get("/").text  # the footer names the Redis, masked
    assert http.get("/health").json() == {"status": "ok", "redis": "ok"}
    locked_redis.halt()
    for path in ["/health", *PAGES]:
        answer = http.get(path)
        assert answer.status_code == 503 and SECRET not in answer.text, (path, answer.text)
    assert "redis://" not in http.get("/health").text
