"""Shared pieces of the benchmarks: a private redis-server and a Ruby Sidekiq check."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import redis

from sidequest.store.dev_server import server_binary


class PrivateRedis:
    """A redis-server on a free port, persistence off, stopped on exit."""

    def __enter__(self) -> PrivateRedis:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="sq-bench-")
        self.proc = subprocess.Popen(
            [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def ruby_sidekiq() -> bool:
    return bool(shutil.which("ruby")) and subprocess.run(
        ["ruby", "-e", "require 'sidekiq'"], capture_output=True).returncode == 0
