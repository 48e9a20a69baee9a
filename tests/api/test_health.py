"""Health checks for containers: `sidequest health` (readiness: Redis answers and takes writes;
the heartbeat check: this host's worker processes beat in Redis) and the dashboard's `GET /health`.
Local liveness (`--live`), through real workers and a supervisor: tests/scenarios/test_probes.py."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import RedisServer, redis_server_binary, wait_until
from helpers import WorkerProcess
from starlette.testclient import TestClient

from sidequest import Client, Config
from sidequest.cli import main
from sidequest.web import create_app

DOWN = "redis://127.0.0.1:1/0"


def health(*args: str):
    """`sidequest health ARGS`: (exit status, its one line)."""
    result = CliRunner().invoke(main, ["health", *args])
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output  # one line, never a traceback
    return result.exit_code, lines[0]


@pytest.fixture
def replica(redis_server) -> object:
    server = RedisServer(redis_server_binary(), ["--replicaof", "127.0.0.1", str(redis_server.port)])
    yield server
    server.stop()


# -- readiness ----------------------------------------------------------------------------------
def test_readiness_is_redis_answering_and_taking_writes(redis_url, r, replica):
    code, line = health("--readiness", "--redis-url", redis_url)
    assert code == 0 and line.startswith("healthy: ") and "accepts writes" in line
    assert health("--redis-url", redis_url)[0] == 0  # readiness is the default check
    code, line = health("--readiness", "--redis-url", DOWN)
    assert code == 1 and line.startswith("unhealthy: ") and "127.0.0.1:1" in line
    code, line = health("--readiness", "--redis-url", replica.url(0))  # answers PING, refuses writes
    assert code == 1 and "read only replica" in line, line


def test_readiness_gives_up_on_a_redis_that_hangs(replica):
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        began = time.monotonic()
        code, line = health("--readiness", "--redis-url", replica.url(0), "--timeout", "0.5")
        assert code == 1 and "unhealthy" in line and time.monotonic() - began < 5
    finally:
        replica.proc.send_signal(signal.SIGCONT)


def test_usage_mistakes_are_one_line(redis_url, tmp_path):
    code, line = health("--identity", "x:1:y", "--redis-url", redis_url)
    assert code == 2 and "--heartbeat" in line
    code, line = health("--live", "--max-age", "5", "--redis-url", redis_url)
    assert code == 2 and "--heartbeat" in line  # the local check reads no heartbeat
    code, line = health("--heartbeat", "--max-age", "-1", "--redis-url", redis_url)
    assert code == 2


# -- the heartbeat check -----------------------------------------------------------------------------------
def test_heartbeat_check_follows_this_hosts_worker_heartbeat(redis_url, r, tmp_path):
    pidfile = tmp_path / "worker.pid"
    code, line = health("--heartbeat", "--redis-url", redis_url)
    assert code == 1 and "no worker process" in line and socket.gethostname() in line
    code, line = health("--heartbeat", "--pidfile", str(pidfile), "--redis-url", redis_url)
    assert code == 1 and str(pidfile) in line  # not started yet: no pidfile
    worker = WorkerProcess(redis_url, "-P", str(pidfile), "--heartbeat-ttl", "30")  # stale long before it expires
    try:
        identity = worker.wait_registered(r)
        wait_until(pidfile.exists, message="the pidfile")
        for args in ([], ["--pidfile", str(pidfile)], ["--identity", identity]):
            code, line = health("--heartbeat", *args, "--redis-url", redis_url)
            assert code == 0 and line.startswith("healthy: ") and identity in line, (args, line)
        # an earlier run with the same host and pid (a restarted container's pid 1), registered
        # until its TTL, stale: the fresh one of that pid decides
        twin = f"{socket.gethostname()}:{worker.proc.pid}:0ld0ld0ld0ld"
        r.sadd("processes", twin)
        r.hset(twin, mapping={"beat": time.time() - 500, "info": json.dumps(
            {"hostname": socket.gethostname(), "pid": worker.proc.pid, "identity": twin})})
        for args in ([], ["--pidfile", str(pidfile)]):
            code, line = health("--heartbeat", *args, "--redis-url", redis_url)
            assert code == 0 and identity in line and twin not in line, (args, line)
        code, line = health("--heartbeat", "--identity", twin, "--redis-url", redis_url)
        assert code == 1 and "last beat 500" in line
        code, line = health("--heartbeat", "--hostname", "elsewhere", "--redis-url", redis_url)
        assert code == 1 and "elsewhere" in line
        assert health("--heartbeat", "--readiness", "--pidfile", str(pidfile), "--redis-url", redis_url)[0] == 0
        code, line = health("--heartbeat", "--pidfile", str(pidfile), "--redis-url", DOWN)
        assert code == 1 and "heartbeat" in line  # cannot tell: Redis holds the heartbeats

        worker.signal(signal.SIGSTOP)  # hung: its heartbeat thread stops too
        try:
            stuck = ["--heartbeat", "--pidfile", str(pidfile), "--max-age", "1", "--redis-url", redis_url]
            line = wait_until(lambda: (lambda c, t: t if c == 1 else None)(*health(*stuck)), 10,
                              message="the heartbeat to go stale")
            assert "s ago" in line and identity in line
        finally:
            worker.signal(signal.SIGCONT)
        wait_until(lambda: health(*stuck)[0] == 0, 10, message="the heartbeat to be fresh again")
    finally:
        worker.stop()
    code, line = health("--heartbeat", "--pidfile", str(pidfile), "--redis-url", redis_url)
    assert code == 1 and str(pidfile) in line  # a clean stop removes its pidfile


def test_heartbeat_check_of_a_supervisor_is_its_children_heartbeats(redis_url, r, tmp_path):
    pidfile = tmp_path / "swarm.pid"
    supervisor = WorkerProcess(redis_url, "--processes", "2", "-P", str(pidfile))
    try:
        wait_until(lambda: r.scard("processes") == 2, 30, message="both children to register")
        wait_until(pidfile.exists, message="the pidfile")
        code, line = health("--heartbeat", "--pidfile", str(pidfile), "--redis-url", redis_url)
        assert code == 0 and "2 worker processes" in line, line
    finally:
        supervisor.stop()


def test_a_pidfile_naming_a_dead_process_is_unhealthy(redis_url, tmp_path):
    pidfile = tmp_path / "stale.pid"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # any process that has ended
    gone.wait()
    pidfile.write_text(f"{gone.pid}\n")
    code, line = health("--heartbeat", "--pidfile", str(pidfile), "--redis-url", redis_url)
    assert code == 1 and f"process {gone.pid}" in line and "not running" in line
    pidfile.write_text("not a pid\n")
    code, line = health("--heartbeat", "--pidfile", str(pidfile), "--redis-url", redis_url)
    assert code == 1 and "no process id" in line


# -- the dashboard's GET /health ----------------------------------------------------------------
def test_dashboard_health_needs_no_login_and_says_whether_redis_answers(client, replica):
    def nobody(request):
        return False

    for app in (create_app(client, basic_auth=("admin", "s3cret")), create_app(client, auth=nobody)):
        http = TestClient(app)
        assert http.get("/").status_code in (401, 403)  # every page still needs the login
        answer = http.get("/health")
        assert answer.status_code == 200 and answer.json()["status"] == "ok"
        assert answer.json()["redis"] == "ok" and answer.headers["cache-control"] == "no-store"
        assert http.head("/health").status_code == 200
        assert http.post("/health").status_code in (401, 403)  # a POST is no probe
    down = TestClient(create_app(Client(Config(redis_url=DOWN))))
    answer = down.get("/health")
    assert answer.status_code == 503 and answer.json()["status"] == "unavailable"
    assert "127.0.0.1:1" in answer.json()["redis"]
    # a read-only replica serves a read-only dashboard: it answers, so the dashboard is healthy
    assert TestClient(create_app(Client(Config(redis_url=replica.url(0))))).get("/health").status_code == 200


def test_dashboard_health_gives_up_on_a_redis_that_hangs(replica):
    http = TestClient(create_app(Client(Config(redis_url=replica.url(0)))))
    assert http.get("/health").status_code == 200
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        began = time.monotonic()
        answer = http.get("/health")
        assert answer.status_code == 503 and time.monotonic() - began < 5  # not the client's 30 s socket timeout
    finally:
        replica.proc.send_signal(signal.SIGCONT)


def test_dashboard_health_is_under_the_mount_point(client):
    from starlette.applications import Starlette
    from starlette.routing import Mount

    host = Starlette(routes=[Mount("/ops/jobs", create_app(client, basic_auth=("admin", "s3cret")))])
    http = TestClient(host)
    assert http.get("/ops/jobs/health").status_code == 200
    assert http.get("/ops/jobs/").status_code == 401


def test_the_deployment_docs_probes_are_real_commands(redis_url, monkeypatch):
    """The Kubernetes snippet in docs/deployment.md parses, and each exec probe is a `sidequest
    health` command line this CLI accepts (no worker runs here: liveness says so, exit 1)."""
    import re

    import yaml
    from conftest import ROOT

    text = (ROOT / "docs" / "deployment.md").read_text()
    [snippet] = re.findall(r"```yaml\n(# worker\.yaml.*?)```", text, re.S)
    pod = yaml.safe_load(snippet)["spec"]["template"]["spec"]
    probes = [c[kind] for c in pod["containers"] for kind in ("readinessProbe", "livenessProbe") if kind in c]
    commands = [p["exec"]["command"] for p in probes if "exec" in p]
    assert len(commands) == 2 and all(c[:2] == ["sidequest", "health"] for c in commands)
    assert [p["httpGet"]["path"] for p in probes if "httpGet" in p] == ["/health"]
    monkeypatch.setenv("REDIS_URL", redis_url)
    results = {" ".join(c[2:]): health(*c[2:]) for c in commands}
    assert results["--ready"][0] == 0
    code, line = results["--live --pidfile /tmp/sidequest.pid"]
    assert code == 1 and "/tmp/sidequest.pid" in line
