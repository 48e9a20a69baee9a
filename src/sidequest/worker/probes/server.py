"""`GET /live` and `GET /ready` on `health_port`, for Kubernetes' HTTP probes: 200 `ok: <why>`
or 503 `unhealthy: <why>`, one line of text. A stdlib `http.server` on a daemon thread: no
dependency, and a probe's request never waits on a job. Off unless `health_port` is set; served
by a worker process (`Launcher`, embedded in an application too) or, under `--processes`, by the
supervisor for its whole fleet.

    server = ProbeServer(config, live=report.live, ready=lambda: check_redis(...))
    server.start()   # ConfigError if the port is taken
    ...
    server.stop()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sidequest.config import Config
from sidequest.errors import ConfigError
from sidequest.worker.probes.readiness import Health

log = logging.getLogger(__name__)


class ProbeServer:
    def __init__(self, config: Config, *, live: Callable[[], Health], ready: Callable[[], Health]) -> None:
        assert config.health_port is not None
        self.host, self.port = config.health_host, config.health_port
        self.checks = {"/live": live, "/ready": ready}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            server = ThreadingHTTPServer((self.host, self.port), _handler(self.checks))
        except OSError as exc:
            raise ConfigError(f"health_port {self.port}: cannot listen on {self.host}:{self.port} "
                              f"({exc.strerror}); give another --health-port") from None
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="sidequest-probes", daemon=True)
        self._thread.start()
        log.info("probes on http://%s:%d/live and /ready", self.host, self.port)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def _handler(checks: dict[str, Callable[[], Health]]) -> type[BaseHTTPRequestHandler]:
    class Probe(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            check = checks.get(self.path.split("?", 1)[0])
            if check is None:
                self._answer(404, "not found: GET /live or /ready")
                return
            try:
                verdict = check()
            except Exception as exc:  # thread boundary: a probe answers, whatever went wrong
                log.exception("the %s probe failed", self.path)
                verdict = Health(False, f"the check failed: {type(exc).__name__}: {exc}")
            self._answer(200 if verdict.ok else 503, f"{'ok' if verdict.ok else 'unhealthy'}: {verdict.reason}")

        def _answer(self, status: int, line: str) -> None:
            body = (" ".join(line.split()) + "\n").encode("utf-8", "replace")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # a probe every few seconds: not news
            log.debug("probe %s", format % args)

    return Probe
