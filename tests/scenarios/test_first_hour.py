"""Traps a new user met in the first hour, each pinned (issue: the first hour)."""

from __future__ import annotations

import logging
import subprocess
import textwrap

import pytest
from conftest import PYTHON, STARTUP, RedisServer, free_port, python_env, wait_until
from helpers import WorkerProcess, ran
from jobs_for_tests import echo

from sidequest import Client, Config, Task
from sidequest.config import Config as ConfigClass
from sidequest.errors import RedisURLError, UnknownJobError
from sidequest.jobs.registry import Registry
from sidequest.store.connection import connect
from sidequest.store.dev_server import server_binary


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: str | None = None, timeout: float = STARTUP):
    return subprocess.run([PYTHON, "-m", "sidequest.cli", *args], env=python_env(**(env or {})), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def http_port():
    """Something listening that is not Redis."""
    port = free_port()
    proc = subprocess.Popen([PYTHON, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import socket
    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False
    wait_until(listening, STARTUP, message="the http server")
    yield port
    proc.terminate()
    proc.wait()


def one_or_two_lines(out: subprocess.CompletedProcess[str]) -> str:
    text = (out.stdout + out.stderr).strip()
    assert "Traceback" not in text and 1 <= len(text.splitlines()) <= 2, text
    return text


def test_a_url_that_is_not_redis_is_one_line_and_exit_2(http_port):
    out = run_cli("worker", env={"REDIS_URL": f"redis://127.0.0.1:{http_port}/0"})
    text = one_or_two_lines(out)
    assert out.returncode == 2 and "does not answer as a Redis server" in text and "REDIS_URL" in text
    with pytest.raises(RedisURLError, match="does not answer as a Redis server"):
        Client(Config(redis_url=f"redis://127.0.0.1:{http_port}/0")).push(echo, [1])


@pytest.mark.parametrize("args, env, words", [
    (["worker", "-L", "/no/such/folder/w.log"], {}, "the folder /no/such/folder does not exist"),
    (["worker", "-P", "/no/such/folder/w.pid"], {}, "the folder /no/such/folder does not exist"),
    (["worker"], {"SIDEQUEST_CONCURRENCY": "many"}, "SIDEQUEST_CONCURRENCY='many' is not a valid int"),
    (["worker"], {"REDIS_URL": "redis://:pw@127.0.0.1:99999/0"}, "invalid Redis URL"),
    (["worker"], {"REDIS_URL": "redis://:pw@127.0.0.1:1/abc"}, "the database 'abc' is not a whole number"),
    (["worker", "--processes", "2"], {"REDIS_URL": "redis://127.0.0.1:1/db1"}, "the database 'db1'"),
    (["stats", "--redis-url", "rediss://127.0.0.1:1/0/"], {}, "the database '0/'"),
    (["worker", "-q", "a,heavy"], {}, "weight"),
    (["worker"], {"REDIS_URL": "http://127.0.0.1:1/"}, "the scheme must be one of redis://"),  # issue 28 item 15
    (["worker"], {"SIDEQUEST_QUEUES": "mail,default"}, "separate them with spaces"),  # issue 28 item 15
    (["stats"], {"SIDEQUEST_QUEUES": "mail,default"}, "SIDEQUEST_QUEUES='mail default'"),  # issue 28 item 15
])
def test_user_errors_are_one_or_two_lines_and_exit_2(args, env, words):
    out = run_cli(*args, env=env)
    text = one_or_two_lines(out)
    assert out.returncode == 2 and words in text
    assert "pw" not in text.replace("pw@", "")  # passwords stay masked


def test_a_unix_socket_url_works_for_client_and_worker(tmp_path, monkeypatch):
    socket_path = tmp_path / "redis.sock"
    server = RedisServer(server_binary(), ["--unixsocket", str(socket_path), "--unixsocketperm", "700"])
    try:
        url = f"unix://{socket_path}?db=0"
        client = Client(Config(redis_url=url))
        jid = client.push(echo, ["over a unix socket"])
        assert jid and connect(url).llen("queue:default") == 1
        monkeypatch.setenv("SQ_TEST_REDIS_URL", url)
        w = WorkerProcess(url)
        r = connect(url)
        wait_until(lambda: ran(r, "echo"), STARTUP, message="the job to run over the socket")  # a worker starting
        w.stop()
        assert w.proc.returncode == 0, w.output
    finally:
        server.stop()


def test_the_worker_names_its_jobs_at_start_and_unknown_names_get_suggestions(redis_url, r):
    w = WorkerProcess(redis_url)
    w.wait_registered(r)
    out = w.stop()
    assert "job(s) registered:" in out and "Echo" in out and "WithHooks" in out
    registry = Registry()

    class Fake:
        name = "app.mail.send_welcome"
    registry.register(Fake)  # type: ignore[arg-type]
    with pytest.raises(UnknownJobError, match=r"did you mean 'app.mail.send_welcome'"):
        registry.get("__main__.send_welcome")
    with pytest.raises(UnknownJobError, match=r"did you mean 'app.mail.send_welcome'.*-r"):
        registry.get("app.mail.send_welcom")


def test_require_by_path_inside_a_package_registers_the_real_dotted_name(tmp_path, redis_url, r):
    pkg = tmp_path / "shop" / "jobs"
    pkg.mkdir(parents=True)
    (tmp_path / "shop" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "mail.py").write_text(textwrap.dedent("""
        import sidequest

        @sidequest.job
        def welcome(user_id):
            pass
    """))
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    w = WorkerProcess(redis_url, "-r", str(pkg / "mail.py"), cwd=str(elsewhere))
    w.wait_registered(r)
    out = w.stop()
    assert "shop.jobs.mail.welcome" in out, out  # the name `-r shop.jobs.mail` gives, the name clients push


def test_list_settings_in_the_environment_share_one_rule():
    c = ConfigClass.from_env({"SIDEQUEST_QUEUES": "critical,3 default,1", "SIDEQUEST_REQUIRE": "a.jobs b.jobs",
                              "SIDEQUEST_LABELS": "blue;green"})
    assert c.queues == (("critical", 3), ("default", 1)) and c.require == ("a.jobs", "b.jobs")
    assert c.labels == ("blue", "green")
    c = ConfigClass.from_env({"SIDEQUEST_QUEUES": "critical,3;default,1", "SIDEQUEST_REQUIRE": "a.jobs,b.jobs"})
    assert c.queue_names == ["critical", "default"] and c.require == ("a.jobs", "b.jobs")


def test_tasks_api_refuses_a_bad_limit_clearly_and_an_empty_sealed_task_is_done(client):
    from starlette.testclient import TestClient

    from sidequest.features.tasks.http import tasks_app

    task = Task.create("nothing to do", client=client)
    assert task.status()["percent"] == 0.0
    task.seal()
    status = task.status()
    assert status["done"] and status["percent"] == 100.0
    http = TestClient(tasks_app(client))
    answer = http.get(f"/tasks/{task.id}/events?limit=abc")
    assert answer.status_code == 400 and answer.json() == {"error": "limit must be a whole number, got 'abc'"}


def test_the_first_retry_is_logged_as_retry_1(start, client, r, caplog):
    from jobs_for_tests import FastBoom
    caplog.set_level(logging.INFO)
    start()
    client.push(FastBoom, ["once"])
    wait_until(lambda: "retry 1 of 2" in caplog.text, message="the first retry's log line")
    assert "retry 0" not in caplog.text


def test_log_level_and_json_format(redis_url, r, client):
    from jobs_for_tests import boom
    w = WorkerProcess(redis_url, "--log-level", "warning", "--log-format", "json")
    w.wait_registered(r)
    client.push(echo, ["quiet"])
    client.push(boom, ["loud"])
    wait_until(lambda: ran(r, "echo") and r.zcard("retry") == 1)
    out = w.stop()
    import json as json_lib
    lines = [json_lib.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines and all({"ts", "level", "pid", "msg"} <= set(line) for line in lines)
    assert not [line for line in lines if line["msg"] in ("start",) or line["msg"].startswith("done:")]
    [fail] = [line for line in lines if line["msg"].startswith("fail:")]
    assert fail["level"] == "warning" and fail["class"] == "Boom" and "Traceback" in fail["msg"]


def _job_queues(source: str) -> list[str | None]:
    """The `queue=` of every job a module defines (`@sidequest.job(...)`, `class X(sidequest.Job, ...)`),
    None for a job that names none (it would go to `default`)."""
    import ast

    def queue_of(keywords: list[ast.keyword]) -> str | None:
        found = [k.value for k in keywords if k.arg == "queue"]
        return found[0].value if found and isinstance(found[0], ast.Constant) else None

    queues: list[str | None] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for deco in node.decorator_list:
                if ast.unparse(deco).startswith("sidequest.job"):
                    queues.append(queue_of(deco.keywords) if isinstance(deco, ast.Call) else None)
        elif isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "sidequest.Job" for b in node.bases):
            queues.append(queue_of(node.keywords))
    return queues


def test_the_docs_examples_do_not_take_each_others_jobs_on_a_shared_redis():
    """Every runnable example module of the docs that a worker runs (`sidequest worker -r x`)
    puts its jobs in queues of its own, and its worker command works exactly those: two of them
    (or an example and your project) on the one development Redis never take each other's jobs."""
    import re

    from conftest import ROOT

    seen: dict[str, str] = {}
    modules = 0
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            first = block.splitlines()[0]
            command = re.search(r"sidequest worker -r (\w+)((?: -q [\w-]+)*)", first)
            name = re.match(r"# (\w+)\.py", first)
            if not command or not name or command.group(1) != name.group(1):
                continue  # not a module a worker runs (a script that pushes to one, say)
            modules += 1
            queues = _job_queues(block)
            worked = command.group(2).split()[1::2]
            where = f"{doc.name}: {name.group(1)}.py"
            assert queues and None not in queues and "default" not in queues, f"{where}: {queues}"
            assert sorted(set(queues)) == sorted(worked), f"{where}: jobs in {queues}, worker on {worked}"
            for queue in set(queues):
                assert seen.setdefault(queue, where) == where, f"{where} shares queue {queue!r} with {seen[queue]}"
    assert modules >= 5  # hello, pricing, geo, reports, hourly
    from sidequest.cli.demo import run as demo  # `make demo` leaves its Redis running for your own workers

    demo_jobs = (demo.greet, demo.crunch, demo.fetch_page, demo.flaky)
    assert {job.payload_options()["queue"] for job in demo_jobs} == {demo.QUEUE} != {"default"}


def test_each_extra_installs_what_its_docs_page_imports():
    """Issue 28 item 15: the `[otel]` extra did not install `opentelemetry-sdk`, which the page's
    example imports (`from opentelemetry.sdk.trace import TracerProvider`)."""
    import re
    import tomllib

    from conftest import ROOT

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    otel = {re.split(r"[<>=\[; ]", requirement, maxsplit=1)[0] for requirement in extras["otel"]}
    text = (ROOT / "docs" / "integrations-observability.md").read_text()
    imported = set(re.findall(r"^from (opentelemetry(?:\.\w+)?)", text, re.M))
    distributions = {"opentelemetry": "opentelemetry-api", "opentelemetry.sdk": "opentelemetry-sdk",
                     "opentelemetry.instrumentation": "opentelemetry-instrumentation"}
    assert imported and {distributions.get(name, "opentelemetry-api") for name in imported} <= otel, imported
