"""`GET /live` and `GET /ready` on `health_port` (`worker/probes/server.py`), of a worker embedded in
this process (a `Launcher` used from Python): served from `run()` to `stop()`, one line each; a port
in use is a ConfigError at start. (Real worker processes and a supervisor: scenarios/test_probes.)"""

from __future__ import annotations

import socket

import pytest
from conftest import free_port, wait_until
from helpers import http_get

from sidequest import Config
from sidequest.errors import ConfigError
from sidequest.worker.probes import state


def test_an_embedded_worker_serves_live_and_ready(start, tmp_path, redis_url):
    port = free_port()
    launcher = start(health_port=port, health_host="127.0.0.1", liveness_timeout=1, health_dir=str(tmp_path))
    wait_until(lambda: http_get(port, "/ready")[0] == 200, 30, 0.05, "the worker to be ready")
    status, body = http_get(port, "/live")
    assert status == 200 and body == f"ok: {launcher.identity}: its threads and event loop answer\n"
    status, body = http_get(port, "/ready")
    assert status == 200 and body.startswith("ok: Redis answers and accepts writes (") and body.count("\n") == 1
    assert http_get(port, "/metrics")[0] == 404
    live = state.judge(Config(health_dir=str(tmp_path)))  # what `sidequest health --live` reads
    assert live.ok and launcher.identity in live.reason
    with pytest.raises(ConfigError, match=f"health_port {port}"):  # the port is taken: one line
        start(health_port=port, health_host="127.0.0.1", health_dir=str(tmp_path))
    launcher.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert not list(tmp_path.glob("*.json"))  # a clean stop removes its liveness file


def test_health_settings_are_checked(monkeypatch):
    for wrong in (0, 65536, "80"):
        with pytest.raises(ConfigError, match="health_port must be a TCP port"):
            Config(health_port=wrong)
    with pytest.raises(ConfigError, match="liveness_timeout"):
        Config(liveness_timeout=0)
    config = Config.from_env({"SIDEQUEST_HEALTH_PORT": "8080", "SIDEQUEST_LIVENESS_TIMEOUT": "2.5",
                              "SIDEQUEST_HEALTH_DIR": "/run/sq"})
    assert (config.health_port, config.liveness_timeout, config.health_dir) == (8080, 2.5, "/run/sq")
    assert Config().health_port is None  # off by default
