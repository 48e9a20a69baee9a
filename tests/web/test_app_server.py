"""The dashboard under a real server (uvicorn, in a thread): a request held in a slow Redis call,
or in the host application's auth hook, never holds up another request.

The slow Redis is a redis-server of the test's own, stopped with SIGSTOP: a command sent to it
waits in its socket until SIGCONT. The test sees that the held request's command has reached
the server (its bytes wait unread in the server's receive queue, `/proc/net/tcp`), so the held
request is, for certain, inside its Redis call while the other request is made.
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from conftest import RedisServer, free_port, redis_server_binary, wait_until
from starlette.requests import Request

from sidequest import Client, Config
from sidequest.web import create_app

# A request that touches no Redis gets this long, however loaded the machine (2 cores shared by
# many processes); the held request is held until the fast one has ended, so "served while the
# other is held" is the proof, and the deadline only says how long the test waits for it.
DEADLINE = 10.0


class Served:
    """An ASGI app served by uvicorn on a free port, in a thread of this process."""

    def __init__(self, app: object) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, 20, message="uvicorn to start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)


class Background:
    """One HTTP GET made on its own thread; `result` once it ended."""

    def __init__(self, url: str) -> None:
        self.response: httpx.Response | None = None
        self.error: Exception | None = None
        self.took = 0.0
        self.thread = threading.Thread(target=self._get, args=(url,), daemon=True)
        self.thread.start()

    def _get(self, url: str) -> None:
        began = time.monotonic()
        try:
            self.response = httpx.get(url, timeout=60)
        except Exception as exc:  # shown by the assertion that reads it
            self.error = exc
        self.took = time.monotonic() - began

    def result(self, timeout: float = 30) -> httpx.Response:
        self.thread.join(timeout)
        assert self.response is not None, f"the held request did not end: {self.error!r}"
        return self.response


def unread_bytes(port: int) -> int:
    """Bytes waiting, unread, in the receive queues of the server's connections on `port`."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if int(local.split(":")[1], 16) == port and state == "01":  # ESTABLISHED
            total += int(queues.split(":")[1], 16)
    return total


@pytest.fixture
def slow_redis() -> Iterator[RedisServer]:
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux's /proc/net/tcp to see a command wait in the stopped server")
    server = RedisServer(redis_server_binary())
    try:
        yield server
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.stop()


def test_a_request_held_in_redis_does_not_hold_up_a_static_file(slow_redis):
    client = Client(Config(redis_url=slow_redis.url(0)))
    served = Served(create_app(client))
    try:
        for path in ("/api/tasks/feedc0de", "/tasks/feedc0de", "/static/sidequest.css"):
            httpx.get(served.url + path, timeout=10)  # every Redis connection the app needs is open now
        assert unread_bytes(slow_redis.port) == 0
        for path in ("/api/tasks/feedc0de", "/tasks/feedc0de"):  # the JSON API, on both of its paths
            slow_redis.proc.send_signal(signal.SIGSTOP)
            held = Background(served.url + path)
            wait_until(lambda: unread_bytes(slow_redis.port) > 0, 10, message="the held request's command")
            try:
                fast = httpx.get(served.url + "/static/sidequest.css", timeout=DEADLINE)
            except httpx.TimeoutException:
                pytest.fail(f"a static file waited behind {path}, held in a Redis call")
            assert fast.status_code == 200
            assert held.response is None and held.thread.is_alive()  # still in its Redis call
            slow_redis.proc.send_signal(signal.SIGCONT)
            assert held.result().status_code == 404
            assert held.took > fast.elapsed.total_seconds()
    finally:
        slow_redis.proc.send_signal(signal.SIGCONT)
        served.stop()


def test_a_sync_auth_hook_that_waits_does_not_hold_up_other_requests(client):
    entered, release = threading.Event(), threading.Event()

    def hook(request: Request) -> bool:  # say, a session looked up in the host's database
        if request.url.path == "/slow":
            entered.set()
            release.wait(30)
        return True

    served = Served(create_app(client, auth=hook))
    try:
        held = Background(served.url + "/slow")
        assert entered.wait(10)
        try:
            fast = httpx.get(served.url + "/static/sidequest.css", timeout=DEADLINE)
        except httpx.TimeoutException:
            pytest.fail("a static file waited behind another request's auth hook")
        assert fast.status_code == 200
        assert held.response is None and held.thread.is_alive()  # still in the hook
        release.set()
        assert held.result().status_code == 404
        assert held.took > fast.elapsed.total_seconds()
    finally:
        release.set()
        served.stop()


def test_no_route_handler_runs_on_the_event_loop(client):
    """What the tests above prove for two routes, for every route: each handler is a plain
    function (Starlette runs it in the thread pool); the ASGI apps among them only dispatch."""
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from sidequest.web.pages.tasks import Negotiated

    def handlers(routes: list) -> Iterator[tuple[str, object]]:
        for route in routes:
            if isinstance(route, Mount):
                if isinstance(route.app, StaticFiles):
                    continue  # reads files through anyio's threads
                yield from handlers(route.routes)
            elif isinstance(route, Route):
                app = route.endpoint.json_app if isinstance(route.endpoint, Negotiated) else route.endpoint
                if isinstance(app, Starlette):  # the tasks JSON API, mounted on a path of its own
                    yield from handlers(app.routes)
                else:  # Negotiated's HTML side runs in the thread pool: checked above
                    yield route.path, app

    found = dict(handlers(create_app(client).routes))
    assert len(found) > 20 and "/tasks/{task_id}/events" in found and "/metrics" in found
    assert [path for path, endpoint in found.items() if inspect.iscoroutinefunction(endpoint)] == []
