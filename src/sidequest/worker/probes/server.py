"""`GET /live` and `GET /ready` on `health_port`, for Kubernetes' HTTP probes: 200 `ok: <why>`
or 503 `unhealthy: <why>`, one line of text. Off unless `health_port` is set; served by a worker
process (`Launcher`, embedded in an application too) or, under `--processes`, by the supervisor
for its whole fleet.

    server = ProbeServer(config, live=report.live, ready=lambda: check_redis(...))
    server.start()   # ConfigError if the port is taken
    ...
    server.stop()

The port listens on every interface by default, with no login, so what reaches it is bounded: an
event loop on one daemon thread holds the connections (a socket each, no thread each), and the
checks run on `CHECKERS` threads, so a probe never waits on a job and the process's threads never
grow with its clients. A client has `READ_TIMEOUT` seconds to send its request (a probe sends it at
once), and at most `MAX_CONNECTIONS` are held: one more closes the one that has waited longest
without a whole request, so idle sockets, however many, never keep a real probe out.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sidequest.config import Config
from sidequest.errors import ConfigError
from sidequest.worker.probes.readiness import Health

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
READ_TIMEOUT = 5.0  # seconds a client may take to send its request line and headers
WRITE_TIMEOUT = 5.0
MAX_HEADER = 8 * 1024  # bytes of request line and headers
CHECKERS = 2  # threads running checks: a `/ready` waiting on a hanging Redis leaves one for `/live`


class ProbeServer:
    def __init__(self, config: Config, *, live: Callable[[], Health], ready: Callable[[], Health]) -> None:
        assert config.health_port is not None
        self.host, self.port = config.health_host, config.health_port
        self.checks = {"/live": live, "/ready": ready}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._waiting: dict[asyncio.StreamWriter, None] = {}  # connections still sending, oldest first
        self._checkers = ThreadPoolExecutor(CHECKERS, thread_name_prefix="sidequest-probe-check")

    def start(self) -> None:
        try:
            listening = socket.create_server((self.host, self.port), backlog=128,
                                             family=socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        except OSError as exc:
            raise ConfigError(f"health_port {self.port}: cannot listen on {self.host}:{self.port} "
                              f"({exc.strerror}); give another --health-port") from None
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(listening),),
                                        name="sidequest-probes", daemon=True)
        self._thread.start()
        log.info("probes on http://%s:%d/live and /ready", self.host, self.port)

    def stop(self) -> None:
        loop, thread, self._loop = self._loop, self._thread, None
        if loop is None or thread is None or self._stopped is None:
            return
        loop.call_soon_threadsafe(self._stopped.set)
        thread.join(READ_TIMEOUT)
        self._checkers.shutdown(wait=False, cancel_futures=True)
        if not thread.is_alive():
            loop.close()

    async def _serve(self, listening: socket.socket) -> None:
        assert self._stopped is not None
        server = await asyncio.start_server(self._answer, sock=listening, limit=MAX_HEADER)
        await self._stopped.wait()
        server.close()  # not wait_closed(): it would wait for the answers under way
        answering = asyncio.all_tasks() - {asyncio.current_task()}
        for task in answering:
            task.cancel()
        await asyncio.gather(*answering, return_exceptions=True)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._waiting) >= MAX_CONNECTIONS:  # the one idle longest makes room
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            oldest.transport.abort()
        self._waiting[writer] = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.transport.abort()  # too slow, too long, or gone: no answer owed
            return
        finally:
            self._waiting.pop(writer, None)
        status, line = await self._verdict(head)
        body = (" ".join(line.split()) + "\n").encode("utf-8", "replace")
        writer.write(f"HTTP/1.1 {status} {STATUS[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
                     .encode("ascii") + body)
        try:
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except (TimeoutError, OSError):
            pass
        writer.close()

    async def _verdict(self, head: bytes) -> tuple[int, str]:
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        path = rest.partition(" ")[0].split("?", 1)[0]
        check = self.checks.get(path)
        if method != "GET":
            return 405, "method not allowed: GET /live or /ready"
        if check is None:
            return 404, "not found: GET /live or /ready"
        try:
            verdict = await asyncio.get_running_loop().run_in_executor(self._checkers, check)
        except Exception as exc:  # thread boundary: a probe answers, whatever went wrong
            log.exception("the %s probe failed", path)
            verdict = Health(False, f"the check failed: {type(exc).__name__}")
        return (200 if verdict.ok else 503), f"{'ok' if verdict.ok else 'unhealthy'}: {verdict.reason}"


STATUS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
