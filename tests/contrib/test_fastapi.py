"""The FastAPI/Starlette lifespan: the example app under real uvicorn with its worker in the same
process, a plain Starlette app in process, and the snippets of docs/integrations-web.md.

uvicorn runs as a subprocess on a free port, its output in a file. On TERM it shuts down
gracefully (the lifespan's shutdown included, where the worker stops) and then, since 0.29,
raises the signal again with the default handler, so a service manager sees "ended by TERM":
the exit status is -SIGTERM, and "Application shutdown complete." says the shutdown succeeded.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import PYTHON, ROOT, STARTUP, free_port, python_env, wait_until
from helpers import queue_items, ran, reserved
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import sidequest
import sidequest.client.sync_client
from sidequest.contrib.fastapi import lifespan

DOC = ROOT / "docs" / "integrations-web.md"
# what the example's worker needs to stop quickly in a test: an idle fetch blocks this long
FAST_STOP = {"SIDEQUEST_FETCH_TIMEOUT": "0.5", "SIDEQUEST_HEARTBEAT_INTERVAL": "0.5"}


class Uvicorn:
    """`uvicorn --app-dir examples fastapi_app:app` on a free port, its output in a log file."""

    def __init__(self, redis_url: str, log_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.log_path = log_dir / "uvicorn.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115  (open while the server runs)
        command = [PYTHON, "-m", "uvicorn", "--app-dir", str(ROOT / "examples"), "--host", "127.0.0.1",
                   "--port", str(self.port), "fastapi_app:app"]
        self.proc = subprocess.Popen(command, env=python_env(REDIS_URL=redis_url, SQ_TEST_REDIS_URL=redis_url,
                                                            **FAST_STOP, **env),
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=STARTUP)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_up(self) -> dict[str, Any]:
        """GET /health once the server answers."""
        def answer() -> dict[str, Any] | None:
            assert self.proc.poll() is None, f"uvicorn exited early:\n{self.output()}"
            try:
                return dict(self.http.get("/health", timeout=2).json())
            except httpx.TransportError:
                return None
        return wait_until(answer, STARTUP, 0.1, "uvicorn to answer")

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STARTUP)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"uvicorn did not exit after TERM:\n{self.output()}") from None

    def cleanup(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def uvicorn(redis_url, tmp_path):
    started: list[Uvicorn] = []

    def start(**env: str) -> Uvicorn:
        started.append(Uvicorn(redis_url, tmp_path, **env))
        return started[-1]

    yield start
    for server in started:
        server.cleanup()


def assert_stopped_cleanly(server: Uvicorn, code: int, r) -> None:
    assert code == -signal.SIGTERM, server.output()
    assert "Application shutdown complete." in server.output()
    assert r.smembers("processes") == set()  # the worker deregistered
    assert reserved(r) == []  # nothing left in a reserved list


def test_the_example_app_awaits_a_job_run_by_the_worker_in_its_own_process(uvicorn, r):
    server = uvicorn()
    health = server.wait_up()
    assert health["up_since"] > 0  # the app's own lifespan ran, inside sidequest's
    identity = health["worker"]
    assert json.loads(r.hget(identity, "info"))["pid"] == server.proc.pid

    reply = server.http.post("/word-counts", json={"text": "To be or not to be"})

    assert reply.status_code == 200, reply.text
    assert reply.json()["counts"] == {"to": 2, "be": 2, "or": 1, "not": 1}
    assert r.hget(f"sidequest:status:{reply.json()['jid']}", "state") == b"done"
    assert_stopped_cleanly(server, server.terminate(), r)


def test_a_job_still_running_at_shutdown_goes_back_to_its_queue(uvicorn, r, redis_url):
    server = uvicorn(SIDEQUEST_REQUIRE="jobs_for_tests", SIDEQUEST_TIMEOUT="1")
    server.wait_up()
    jid = sidequest.Client(sidequest.Config(redis_url=redis_url)).push("Blocker", ["gate"])
    wait_until(lambda: ran(r, "blocker-start"), STARTUP, message="the job to start in uvicorn's worker")

    code = server.terminate()

    assert [job["jid"] for job in queue_items(r)] == [jid]  # put back after the 1 s deadline
    assert ran(r, "blocker-done") == []
    assert_stopped_cleanly(server, code, r)


# -- in process: a plain Starlette app ---------------------------------------------------------

@pytest.fixture
def own_default(monkeypatch):
    """Whatever a test configures as the default client is undone after it."""
    monkeypatch.setattr(sidequest.client.sync_client, "_default", None)


@sidequest.job(name="tests.contrib.remember")
def remember(word: str) -> None: ...


async def push(request: Request) -> JSONResponse:
    jid = await remember.aio.perform_async(request.path_params["word"])
    same = sidequest.client.async_client.default_client() is request.app.state.sidequest
    return JSONResponse({"jid": jid, "default": same, "state": request.state.greeting})


@pytest.mark.usefixtures("own_default")
def test_a_starlette_app_gets_the_default_async_client_and_keeps_its_own_lifespan_state(redis_url, r):
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def mine(app: Starlette):
        yield {"greeting": "hi"}  # lifespan state, passed through

    config = sidequest.Config(redis_url=redis_url)
    app = Starlette(routes=[Route("/push/{word}", push, methods=["POST"])], lifespan=lifespan(config, inner=mine))

    with TestClient(app) as client:
        assert isinstance(app.state.sidequest, sidequest.AsyncClient)
        assert app.state.sidequest_worker is None
        body = client.post("/push/hello").json()

    assert body["default"] is True and body["state"] == "hi"
    assert [(job["jid"], job["args"]) for job in queue_items(r)] == [(body["jid"], ["hello"])]
    assert sidequest.default_client().config is config  # job.perform_async uses it too


# -- the docs ----------------------------------------------------------------------------------

def doc_section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def included_examples(section: str) -> list[tuple[str, str]]:
    """(path, code) of each block introduced by `<!-- include: PATH -->`."""
    return re.findall(r"<!-- include: (\S+) -->\n```python\n(.*?)```", section, re.S)


def snippets(section: str) -> list[str]:
    """Python blocks introduced by `<!-- run -->`: run as written by the tests."""
    return re.findall(r"<!-- run -->\n```python\n(.*?)```", section, re.S)


def test_the_docs_show_the_example_app_as_it_is():
    examples = included_examples(doc_section("FastAPI and Starlette"))
    assert [path for path, _ in examples] == ["examples/fastapi_app.py"]
    for path, code in examples:
        assert code == (ROOT / path).read_text(encoding="utf-8")


@pytest.mark.usefixtures("own_default")
def test_the_docs_nested_lifespan_runs_a_worker_while_the_app_is_up(redis_url, r):
    [code] = snippets(doc_section("FastAPI and Starlette"))
    sidequest.configure(sidequest.Config(redis_url=redis_url, fetch_timeout=0.5))
    namespace: dict[str, Any] = {"__name__": "docs_snippet"}
    exec(compile(code, str(DOC), "exec"), namespace)

    with TestClient(namespace["app"]):
        worker = namespace["app"].state.sidequest_worker
        assert r.sismember("processes", worker.identity)
    assert worker.stopped.is_set()  # stopped by the app's shutdown, before TestClient returned
    assert not r.sismember("processes", worker.identity)
