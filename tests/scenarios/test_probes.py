"""Probes by the convention, through real worker processes and a supervisor of two: liveness
(`sidequest health --live`, `GET /live`) is local and needs no Redis, so a Redis outage leaves
it healthy while readiness (`--ready`, `GET /ready`) fails; a worker whose heartbeat thread has
stopped, or whose event loop is blocked past `liveness_timeout`, is not live."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from conftest import STARTUP, RedisServer, free_port, redis_server_binary, wait_until
from helpers import WorkerProcess, http_get

from sidequest import Client, Config
from sidequest.cli import main

TIMEOUT = "1"  # liveness_timeout, seconds: short, so a stuck part shows at once
FLEETS = [pytest.param([], id="worker"), pytest.param(["--processes", "2"], id="supervisor")]


class Probed:
    """A worker (or supervisor) with a health port and its own liveness folder, and the probes."""

    def __init__(self, url: str, tmp: Path, *args: str) -> None:
        self.url, self.port, self.dir = url, free_port(), str(tmp / "live")
        self.pidfile = tmp / "worker.pid"
        self.env = {"SIDEQUEST_HEALTH_DIR": self.dir, "SIDEQUEST_LIVENESS_TIMEOUT": TIMEOUT}
        self.worker = WorkerProcess(url, "-r", "probe_jobs", "-P", str(self.pidfile), "-t", "2",
                                    "--health-port", str(self.port), *args, env=self.env)

    def cli(self, *args: str) -> tuple[int, str]:
        """`sidequest health ARGS` for this worker: (exit status, its one line)."""
        result = CliRunner().invoke(main, ["health", *args, "--pidfile", str(self.pidfile)],
                                    env={**self.env, "REDIS_URL": self.url})
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output  # one line, never a traceback
        return result.exit_code, lines[0]

    def http(self, path: str) -> tuple[int, str]:
        """`GET path` on the health port: (status, body); (0, why) while nothing answers."""
        return http_get(self.port, path)

    def wait(self, want_live: bool | None = None, want_ready: bool | None = None, timeout: float = STARTUP) -> None:
        """Wait until both the CLI and the port say what is wanted."""
        def holds() -> bool:
            assert self.worker.proc.poll() is None, self.worker.output
            checks = []
            if want_live is not None:
                checks += [(self.cli("--live")[0] == 0) == want_live, (self.http("/live")[0] == 200) == want_live]
            if want_ready is not None:
                checks += [(self.cli("--ready")[0] == 0) == want_ready,
                           (self.http("/ready")[0] == 200) == want_ready]
            return all(checks)
        wait_until(holds, timeout, 0.1, f"live={want_live} ready={want_ready}")

    def written_after(self, moment: float) -> bool:
        """The liveness file of the process the probes ask was written after `moment` (wall time)."""
        pid = self.pidfile.read_text().strip()
        try:
            return bool(json.loads((Path(self.dir) / f"{pid}.json").read_text())["at"] > moment)
        except (OSError, ValueError, KeyError):
            return False

    def stop(self) -> str:
        return self.worker.stop()


@pytest.fixture
def own_redis():
    server = RedisServer(redis_server_binary())
    yield server
    server.stop()


@pytest.mark.parametrize("fleet", FLEETS)
def test_liveness_needs_no_redis_and_readiness_does(own_redis, tmp_path, fleet):
    probed = Probed(own_redis.url(0), tmp_path, *fleet)
    try:
        probed.wait(want_live=True, want_ready=True)
        code, line = probed.cli("--live")
        assert line.startswith("healthy: "), line
        status, body = probed.http("/live")
        assert status == 200 and body.startswith("ok") and body.count("\n") <= 1, body
        own_redis.halt()
        halted = time.time()
        probed.wait(want_ready=False)
        code, line = probed.cli("--ready")
        assert code == 1 and line.startswith("unhealthy: ") and str(own_redis.port) in line, line
        status, body = probed.http("/ready")
        assert status == 503 and str(own_redis.port) in body, body
        # live all through the outage, well past liveness_timeout (each file written since says so)
        wait_until(lambda: probed.written_after(halted + 3 * float(TIMEOUT)), 30, 0.1, "the outage to last")
        probed.wait(want_live=True, timeout=5)
        assert probed.cli("--liveness")[0] == 0  # the old spelling is the same check
        assert probed.cli("--readiness")[0] == 1
    finally:
        output = probed.stop()
    assert "Traceback" not in output, output


@pytest.mark.parametrize("fleet", FLEETS)
def test_a_stopped_heartbeat_thread_is_not_live(redis_url, tmp_path, fleet):
    probed = Probed(redis_url, tmp_path, *fleet)
    try:
        probed.wait(want_live=True)
        Client(Config(redis_url=redis_url)).push("StopHeartbeat", [])
        probed.wait(want_live=False, timeout=30)
        code, line = probed.cli("--live")
        assert code == 1 and line.startswith("unhealthy: ") and "heartbeat" in line, line
        status, body = probed.http("/live")
        assert status == 503 and "heartbeat" in body, body
    finally:
        probed.stop()


@pytest.mark.parametrize("fleet", FLEETS)
def test_an_event_loop_blocked_past_the_threshold_is_not_live(redis_url, tmp_path, fleet):
    r = redis.Redis.from_url(redis_url)
    probed = Probed(redis_url, tmp_path, "--runner", "asyncio", *fleet)
    try:
        probed.wait(want_live=True)
        Client(Config(redis_url=redis_url)).push("BlockLoop", ["release"])
        wait_until(lambda: r.exists("release:started"), 30, message="the job to block the loop")
        probed.wait(want_live=False, timeout=30)
        code, line = probed.cli("--live")
        assert code == 1 and "event loop" in line and "blocked" in line, line
        status, body = probed.http("/live")
        assert status == 503 and "event loop" in body, body
        r.set("release", 1)  # the loop runs again: live again
        probed.wait(want_live=True, timeout=30)
    finally:
        r.set("release", 1)
        probed.stop()
        r.close()


def test_a_frozen_worker_is_not_live(redis_url, tmp_path):
    """A process that stops running altogether (SIGSTOP; a debugger) writes no more verdicts: its
    liveness file goes stale, and `--live` says so without asking the process."""
    probed = Probed(redis_url, tmp_path)
    try:
        probed.wait(want_live=True)
        probed.worker.signal(signal.SIGSTOP)
        try:
            line = wait_until(lambda: (lambda c, t: t if c == 1 else None)(*probed.cli("--live")), 30, 0.1,
                              "the liveness file to go stale")
            assert "s ago" in line and "stuck or frozen" in line, line
        finally:
            probed.worker.signal(signal.SIGCONT)
        probed.wait(want_live=True, timeout=30)
    finally:
        probed.stop()


def threads_of(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def test_idle_connections_neither_grow_threads_nor_starve_the_probes(redis_url, tmp_path):
    """300 clients that each send half a request and wait: the worker's thread count stays within
    a few of what it was, `/live` and `/ready` still answer within a second, and once the clients
    leave, nothing of them is left."""
    import socket

    probed = Probed(redis_url, tmp_path)
    idle: list[socket.socket] = []
    try:
        probed.wait(want_live=True, want_ready=True)
        pid = probed.worker.proc.pid
        before = threads_of(pid)
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", probed.port), timeout=5)
            sock.sendall(b"GET /live HTTP/1.1\r\nHost: probe\r\n")  # and never the blank line
            idle.append(sock)
        for path in ("/live", "/ready"):
            took = []
            for _ in range(3):  # the fastest within a second (a kubelet's default timeout), none starved: a
                began = time.monotonic()  # loaded CI machine once took 1.01 s for one answer
                status, body = probed.http(path)
                took.append(time.monotonic() - began)
                assert status == 200, (path, status, body)
            assert min(took) < 1.0 and max(took) < 3.0, (path, took)
        assert threads_of(pid) <= before + 2, (before, threads_of(pid))
    finally:
        for sock in idle:
            sock.close()
    try:
        wait_until(lambda: threads_of(pid) <= before + 2, 10, 0.1, "the threads to be back")
        assert probed.http("/live")[0] == 200
    finally:
        output = probed.stop()
    assert "Traceback" not in output, output
