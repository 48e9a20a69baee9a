"""The Flask extension: settings from `app.config`, the default client, and jobs that a real
`sidequest worker` runs inside the app's context (examples/flask_app.py, imported with `-r`).

Importing the example creates its app, which configures the default client and registers a
worker hook in this process: the `example` fixture imports it with both undone after the test.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

import pytest
from conftest import ROOT, STARTUP, wait_until
from flask import Flask
from helpers import queue_items
from scenarios.test_reliability import Worker

import sidequest
import sidequest.client.sync_client
import sidequest.worker.launcher
from sidequest import ConfigError
from sidequest.contrib.flask import AppContext, Sidequest, State

DOC = ROOT / "docs" / "integrations-web.md"
EXAMPLE = ROOT / "examples" / "flask_app.py"


@pytest.fixture
def isolated(monkeypatch):
    """The default client and the worker hooks a test sets up are undone after it."""
    monkeypatch.setattr(sidequest.client.sync_client, "_default", None)
    monkeypatch.setattr(sidequest.worker.launcher, "_worker_hooks", [])


@pytest.fixture
def example(isolated, monkeypatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    return importlib.import_module("flask_app")


@pytest.fixture
def worker(redis_url, tmp_path):
    started: list[Worker] = []

    def start(*args: str, **env: str) -> Worker:
        started.append(Worker(redis_url, tmp_path, *args, env=env))
        return started[-1]

    yield start
    for one in started:
        one.cleanup()


def test_a_view_enqueues_and_the_worker_runs_the_job_inside_its_app_context(example, worker, redis_url, r):
    app = example.create_app({"SIDEQUEST_REDIS_URL": redis_url, "TESTING": True})
    reply = app.test_client().post("/signups/ada@example.com")
    assert reply.status_code == 202
    assert [job["jid"] for job in queue_items(r)] == [reply.json["jid"]]

    # the worker's app reads its own settings: this sender proves the job saw that app's config
    process = worker("-r", str(EXAMPLE), FLASK_WELCOME_FROM="team@example.org")
    mails = wait_until(lambda: app.test_client().get("/outbox").json, STARTUP, 0.05, "the welcome mail")

    assert mails == [{"from": "team@example.org", "to": "ada@example.com", "subject": "Welcome!"}]
    assert process.stop() == 0, process.output()


def test_outside_a_worker_of_the_app_a_job_has_no_app_context(example, redis_url):
    app = example.create_app({"SIDEQUEST_REDIS_URL": redis_url})
    with pytest.raises(RuntimeError, match="application context"):
        example.send_welcome("bob@example.com")  # called directly: nothing pushed it into a context
    assert AppContext(app)(None, {}, "default", lambda: example.current_app.name) == app.name


@pytest.mark.usefixtures("isolated")
def test_settings_come_from_app_config_on_top_of_the_environment(redis_url, monkeypatch):
    monkeypatch.setenv("SIDEQUEST_TIMEOUT", "7")
    app = Flask("shop")
    app.config.update(SIDEQUEST_REDIS_URL=redis_url, SIDEQUEST_QUEUES="mail,2 default,1",
                      SIDEQUEST_CONCURRENCY=3, SIDEQUEST_LABELS=["web"], OTHER_SETTING="ignored")
    sq = Sidequest(app)

    config = app.extensions["sidequest"].config
    assert (config.redis_url, config.queues, config.concurrency, config.labels, config.timeout) == (
        redis_url, (("mail", 2), ("default", 1)), 3, ("web",), 7.0)
    assert sidequest.default_client() is app.extensions["sidequest"].client
    with app.app_context():
        assert sq.config is config and sq.client is sidequest.default_client()


@pytest.mark.usefixtures("isolated")
def test_the_result_ttl_setting_keeps_every_jobs_result(redis_url, r):
    """Issue 30 item 5: `SIDEQUEST_RESULT_TTL` is the process-wide default of the job option."""
    from jobs_for_tests import plain

    app = Flask("results")
    app.config.update(SIDEQUEST_REDIS_URL=redis_url, SIDEQUEST_RESULT_TTL="600")
    Sidequest(app)
    jid = plain.perform_async(1)
    assert 0 < r.pttl(f"sidequest:status:{jid}") <= 600_000 and sidequest.status(jid) == "queued"


@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize(("key", "value", "message"), [
    ("SIDEQUEST_CONCURENCY", 5, "app.config['SIDEQUEST_CONCURENCY'] is not a sidequest setting; "
                                "did you mean SIDEQUEST_CONCURRENCY?"),
    ("SIDEQUEST_CONCURRENCY", "many", "SIDEQUEST_CONCURRENCY='many' is not a valid int"),
    ("SIDEQUEST_CONCURRENCY", 0, "concurrency must be a whole number, 1 or more; got 0"),
])
def test_a_wrong_setting_is_refused_in_one_line(key: str, value: Any, message: str):
    app = Flask("shop")
    app.config[key] = value
    with pytest.raises(ConfigError) as refused:
        Sidequest(app)
    assert str(refused.value) == message


def timing(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    return call_next()


def test_a_worker_hook_puts_the_app_context_first_in_the_chain(isolated, redis_url):
    app = Flask("shop")
    app.config["SIDEQUEST_REDIS_URL"] = redis_url
    Sidequest().init_app(app)
    config = sidequest.Config(redis_url=redis_url)
    config.server_middleware.add(timing)

    sidequest.worker.launcher.run_worker_hooks(config)

    # (process-wide links, if any, run outside both: `middleware.PROCESS_SERVER`)
    assert [link for link in config.server_middleware if link in (AppContext, timing)] == [AppContext, timing]
    assert isinstance(app.extensions["sidequest"], State)


def test_a_worker_on_another_redis_than_the_app_says_so(isolated, redis_url, caplog):
    app = Flask("shop")
    app.config["SIDEQUEST_REDIS_URL"] = redis_url
    Sidequest(app)

    sidequest.worker.launcher.run_worker_hooks(sidequest.Config(redis_url="redis://elsewhere:6379/0"))

    assert [r.getMessage() for r in caplog.records] == [
        f"this worker takes jobs from redis://elsewhere:6379/0, but the Flask app 'shop' pushes them to {redis_url}: "
        "give both the same Redis (REDIS_URL, or the app's SIDEQUEST_REDIS_URL)"]


# -- the docs ----------------------------------------------------------------------------------

def flask_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index("\n## Flask\n"):]


def test_the_docs_show_the_example_app_as_it_is():
    examples = re.findall(r"<!-- include: (\S+) -->\n```python\n(.*?)```", flask_section(), re.S)
    assert [path for path, _ in examples] == ["examples/flask_app.py"]
    assert examples[0][1] == EXAMPLE.read_text(encoding="utf-8")


@pytest.mark.usefixtures("isolated")
def test_the_docs_settings_snippet_runs_as_written(capsys):
    [code] = re.findall(r"<!-- run -->\n```python\n(.*?)```", flask_section(), re.S)
    exec(compile(code, str(DOC), "exec"), {"__name__": "docs_snippet"})
    assert capsys.readouterr().out == "['mail', 'default'] 5\n"
