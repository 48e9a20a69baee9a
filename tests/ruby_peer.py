"""Helpers to drive real Ruby Sidekiq 6.4 (Debian's ruby-sidekiq) from the tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from conftest import STARTUP

RUBY_DIR = Path(__file__).parent / "ruby"


def ruby_env(redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["REDIS_URL"] = redis_url
    return env


def ruby_push(redis_url: str, *command: str) -> list[str]:
    out = subprocess.run(["ruby", str(RUBY_DIR / "push.rb"), *command], env=ruby_env(redis_url),
                         capture_output=True, text=True, timeout=2 * STARTUP, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ruby_api(redis_url: str, *actions: str) -> dict:
    """What Sidekiq's Ruby API reads (tests/ruby/api.rb), after `actions` such as "quiet!" or "stop!"."""
    out = subprocess.run(["ruby", str(RUBY_DIR / "api.rb"), *actions], env=ruby_env(redis_url),
                         capture_output=True, text=True, timeout=2 * STARTUP)
    assert out.returncode == 0, f"Sidekiq's Ruby API failed:\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


class RubySidekiq:
    """A real `sidekiq` process working the given queues."""

    def __init__(self, redis_url: str, queues: tuple[str, ...] = ("default",), concurrency: int = 2,
                 require: Path = RUBY_DIR / "jobs.rb"):
        args = ["sidekiq", "-r", str(require), "-c", str(concurrency), "-t", "3"]
        for q in queues:
            args += ["-q", q]
        self.proc = subprocess.Popen(args, env=ruby_env(redis_url), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out or ""
