"""ActiveJob both ways, against real Rails ActiveJob 6.1 on real Ruby Sidekiq 6.4 (Debian's
ruby-activejob and ruby-sidekiq; tests/ruby/active_job.rb is the Rails side):

- a Rails `perform_later` runs in a sidequest worker under the ActiveJob's name, exactly once,
  its arguments as the Ruby caller passed them (keywords as keywords);
- `sidequest.push_active_job` is run by a Rails worker as that ActiveJob, exactly once, with its
  job_id, executions and provider_job_id (the Sidekiq jid);
- a wrapped job that fails, in either language, goes to the retry set with its wrapper as it
  was pushed, and the other language runs that retry.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import REQUIRE_RUBY, STARTUP, wait_until
from jobs_for_tests import record
from ruby_peer import RUBY_DIR, RubySidekiq, ruby_api, ruby_env

import sidequest
from sidequest.api import RetrySet
from sidequest.jobs.registry import Registry

RAILS = RUBY_DIR / "active_job.rb"
WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
REGISTRY = Registry()  # the Python side's ActiveJob names, for this module's workers only


def described(value: Any) -> Any:
    """A value with its Python type, as JSON, for a job to record what it received."""
    if isinstance(value, list):
        return [described(v) for v in value]
    if isinstance(value, dict):
        return {k: described(v) for k, v in value.items()}
    if isinstance(value, (datetime, date)):
        return [type(value).__name__, value.isoformat()]
    if isinstance(value, timedelta):
        return ["timedelta", value.total_seconds()]
    return value


@sidequest.job(name="SendReceiptJob", registry=REGISTRY)
def send_receipt(*args: Any, **kwargs: Any) -> None:
    record("SendReceiptJob", described(list(args)), described(kwargs))


class FailingReceiptJob(sidequest.Job, name="FailingReceiptJob", registry=REGISTRY):
    """Fails while `test:aj-fail` is set, as its Ruby namesake does."""

    def perform(self, *args: Any, **kwargs: Any) -> None:
        record("FailingReceiptJob", self.jid, list(args), kwargs)
        if sidequest.redis().get("test:aj-fail"):
            raise ValueError("receipt failed in Python")


ASYNC_REGISTRY = Registry()  # the same name as an `async def` job, for the asyncio runner


@sidequest.job(name="SendReceiptJob", registry=ASYNC_REGISTRY)
async def send_receipt_async(*args: Any, **kwargs: Any) -> None:
    record("async SendReceiptJob", described(list(args)), described(kwargs))


@sidequest.job(name="SendReceiptJob", active_job=True, registry=Registry(), queue="receipts")
def receipt_for_rails(order_id: int, currency: str) -> None:
    """Run by Rails: this side only pushes it (its signature checks each push)."""


DECLARED = Registry()  # an active_job=True job with keywords, which this side pushes and may run


@sidequest.job(name="SendReceiptJob", active_job=True, registry=DECLARED, queue="receipts")
def receipt_with_note(order_id: int, currency: str, *, note: str = "", copies: int = 1) -> None:
    record("receipt_with_note", order_id, currency, note, copies)


@pytest.fixture
def rails(ruby: str) -> str:
    """Skip (or, under CI, fail) when Rails' ActiveJob is not installed beside Ruby Sidekiq."""
    found = shutil.which("ruby") and subprocess.run(["ruby", "-ractive_job", "-rsidekiq", "-e", ""],
                                                    capture_output=True).returncode == 0
    if not found:
        if REQUIRE_RUBY:
            pytest.fail("Rails' ActiveJob is required (apt-get install ruby-activejob) but missing")
        pytest.skip("Rails' ActiveJob not installed (apt-get install ruby-activejob)")
    return "ruby"


@pytest.fixture
def default_client(client, monkeypatch):
    """`sidequest.push_active_job` and `sidequest.redis()` on the test Redis, for this test only."""
    monkeypatch.setattr("sidequest.client.sync_client._default", client)
    return client


def rails_push(redis_url: str, command: str) -> list[str]:
    """Run a Rails app's `perform_later` calls (tests/ruby/active_job.rb); the Sidekiq jids."""
    out = subprocess.run(["ruby", str(RAILS), command], env=ruby_env(redis_url), capture_output=True,
                         text=True, timeout=2 * STARTUP)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def ran(r) -> list[Any]:
    return [json.loads(item) for item in r.lrange("test:ran", 0, -1)]


def rails_ran(r) -> list[dict[str, Any]]:
    return [json.loads(item) for item in r.lrange("test:aj-ran", 0, -1)]


def queued(r, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(item) for item in r.lrange(f"queue:{queue}", 0, -1)]


def test_rails_perform_later_runs_in_sidequest_under_its_name_exactly_once(rails, r, redis_url, start):
    jids = rails_push(redis_url, "push")
    pushed = {p["jid"]: p for p in queued(r)}
    assert {p["class"] for p in pushed.values()} == {WRAPPER}
    worker = start(registry=REGISTRY)
    wait_until(lambda: len(ran(r)) >= 2 and r.llen("queue:default") == 0, 30, 0.05, "both Rails jobs to run")
    worker.stop()
    assert sorted(map(json.dumps, ran(r))) == sorted(map(json.dumps, [
        ["SendReceiptJob", [42, "eur"], {"note": "x"}],
        ["SendReceiptJob", [{"a": 1, "b": [2, None]}, "card", ["datetime", "2024-01-02T03:04:05+00:00"],
                            ["date", "2024-01-02"], ["timedelta", 90.0], {"k": 1}, "gid://shop/User/7"], {}],
    ]))
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and set(jids) == set(pushed)


def test_the_asyncio_runner_runs_a_rails_job_with_its_keywords(rails, r, redis_url, start):
    rails_push(redis_url, "push")
    worker = start(registry=ASYNC_REGISTRY, runner="asyncio")
    wait_until(lambda: len(ran(r)) >= 2 and r.llen("queue:default") == 0, 30, 0.05, "both Rails jobs to run")
    worker.stop()
    assert ["async SendReceiptJob", [42, "eur"], {"note": "x"}] in ran(r) and len(ran(r)) == 2


def test_a_failing_rails_job_retries_with_its_wrapper_and_ruby_runs_the_retry(rails, r, redis_url, start,
                                                                            default_client):
    r.set("test:aj-fail", "1")
    [jid] = rails_push(redis_url, "push-failing")
    [pushed] = queued(r)
    worker = start(registry=REGISTRY)
    wait_until(lambda: r.zcard("retry") == 1, 30, 0.05, "the failure to reach the retry set")
    worker.stop()
    assert ran(r) == [["FailingReceiptJob", jid, [7, "usd"], {"note": "retry me"}]]
    [retried] = [json.loads(raw) for raw in r.zrange("retry", 0, -1)]
    assert {k: retried[k] for k in ("class", "wrapped", "args", "jid")} == {
        k: pushed[k] for k in ("class", "wrapped", "args", "jid")}
    assert retried["error_class"] == "ValueError" and retried["retry_count"] == 0
    [seen] = ruby_api(redis_url)["retries"]  # Sidekiq's Web UI shows it as the ActiveJob
    assert seen["display_class"] == "FailingReceiptJob" and seen["jid"] == jid

    r.delete("test:aj-fail")
    assert RetrySet(default_client).find_job(jid).retry()
    peer = RubySidekiq(redis_url, require=RAILS)
    try:
        wait_until(lambda: r.llen("test:aj-ran") >= 1 and r.llen("queue:default") == 0, 60, 0.1,
                   "Rails to run the retry")
    finally:
        log = peer.stop()
    [done] = rails_ran(r)
    job_data = pushed["args"][0]
    assert (done["job_class"], done["job_id"], done["provider_job_id"]) == ("FailingReceiptJob", job_data["job_id"],
                                                                            jid), log
    assert done["kwargs"] == {":note": {"class": "String", "value": "retry me"}}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_push_active_job_runs_in_rails_as_that_job_exactly_once(rails, r, redis_url, default_client):
    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=1)))
    jid = sidequest.push_active_job("SendReceiptJob", [42, "eur", {"a": [1, None]}, when, date(2024, 1, 2),
                                                       timedelta(seconds=90)], {"note": "x"}, rails_priority=5)
    [pushed] = queued(r)
    assert (pushed["class"], pushed["wrapped"], pushed["jid"]) == (WRAPPER, "SendReceiptJob", jid)
    job_data = pushed["args"][0]
    peer = RubySidekiq(redis_url, require=RAILS)
    try:
        wait_until(lambda: r.llen("test:aj-ran") >= 1 and r.llen("queue:default") == 0, 60, 0.1,
                   "Rails to run the job")
    finally:
        log = peer.stop()
    [done] = rails_ran(r)  # exactly once: the Ruby process has stopped
    assert {k: done[k] for k in ("job_class", "job_id", "provider_job_id", "executions", "queue_name", "priority",
                                 "locale", "timezone")} == {
        "job_class": "SendReceiptJob", "job_id": job_data["job_id"], "provider_job_id": jid, "executions": 1,
        "queue_name": "default", "priority": 5, "locale": "en", "timezone": "UTC"}, log
    assert done["args"] == [
        {"class": "Integer", "value": 42}, {"class": "String", "value": "eur"},
        {'"a"': [{"class": "Integer", "value": 1}, {"class": "NilClass", "value": None}]},
        {"class": "Time", "value": "2024-01-02 03:04:05 +0100"}, {"class": "Date", "value": "2024-01-02"},
        {"class": "ActiveSupport::Duration", "value": "90 seconds"}]
    assert done["kwargs"] == {":note": {"class": "String", "value": "x"}}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_a_failing_pushed_active_job_retries_in_ruby_with_its_wrapper_and_sidequest_runs_the_retry(
        rails, r, redis_url, start, default_client):
    r.set("test:aj-fail", "1")
    jid = sidequest.push_active_job("FailingReceiptJob", [7, "usd"], {"note": "retry me"})
    [pushed] = queued(r)
    peer = RubySidekiq(redis_url, require=RAILS)
    try:
        wait_until(lambda: r.zcard("retry") == 1, 60, 0.1, "Rails to fail the job into the retry set")
    finally:
        log = peer.stop()
    [retried] = [json.loads(raw) for raw in r.zrange("retry", 0, -1)]
    assert {k: retried[k] for k in ("class", "wrapped", "args", "jid")} == {
        k: pushed[k] for k in ("class", "wrapped", "args", "jid")}, log
    assert retried["error_class"] == "ArgumentError" and rails_ran(r)[0]["provider_job_id"] == jid

    r.delete("test:aj-fail")
    assert RetrySet(default_client).find_job(jid).retry()
    worker = start(registry=REGISTRY)
    wait_until(lambda: ran(r) and r.llen("queue:default") == 0, 30, 0.05, "sidequest to run the retry")
    worker.stop()
    assert ran(r) == [["FailingReceiptJob", jid, [7, "usd"], {"note": "retry me"}]]
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0



def run_by_rails(r, redis_url: str) -> tuple[dict, str]:
    """Real Sidekiq with Rails works queue `receipts` until its one job ran: what perform got, and its log."""
    peer = RubySidekiq(redis_url, queues=("receipts",), require=RAILS)
    try:
        wait_until(lambda: r.llen("test:aj-ran") >= 1 and r.llen("queue:receipts") == 0, 60, 0.1,
                   "Rails to run the job")
    finally:
        log = peer.stop()
    [done] = rails_ran(r)
    return done, log


def test_a_job_declared_active_job_is_pushed_for_rails_to_run(rails, r, redis_url, default_client):
    jid = receipt_for_rails.set(client=default_client).perform_async(43, "gbp")
    [pushed] = queued(r, "receipts")
    assert (pushed["class"], pushed["wrapped"], pushed["args"][0]["arguments"]) == (WRAPPER, "SendReceiptJob",
                                                                                     [43, "gbp"])
    done, log = run_by_rails(r, redis_url)
    assert (done["job_class"], done["provider_job_id"], done["queue_name"]) == ("SendReceiptJob", jid, "receipts"), log
    assert done["args"] == [{"class": "Integer", "value": 43}, {"class": "String", "value": "gbp"}]


def test_the_dashboard_and_api_show_a_rails_job_by_its_activejob_name(rails, r, redis_url, client):
    from starlette.testclient import TestClient

    from sidequest.api import Queue
    from sidequest.web import create_app

    rails_push(redis_url, "push")
    records = list(Queue("default", client))
    assert {(j.klass, j.display_class) for j in records} == {(WRAPPER, "SendReceiptJob")}
    assert [42, "eur", {"note": "x", "_aj_ruby2_keywords": ["note"]}] in [j.display_args for j in records]
    page = TestClient(create_app(client)).get("/queues/default", headers={"Accept": "text/html"}).text
    assert page.count("SendReceiptJob") == 2 and "JobWrapper" not in page and "eur" in page


HOOKED = Registry()


@sidequest.job(name="SendReceiptJob", registry=HOOKED,
               after_succeeded=lambda *args, **kwargs: record("after_succeeded", list(args), kwargs))
def hooked_receipt(order_id: int, currency: str, note: str = "") -> None:
    record("hooked", order_id, currency, note)


def test_a_wrapped_jobs_hooks_get_its_activejob_arguments(r, start, default_client):
    sidequest.push_active_job("SendReceiptJob", [42, "eur"], {"note": "x"})
    worker = start(registry=HOOKED)
    wait_until(lambda: len(ran(r)) >= 2, 30, 0.05, "the job and its hook")
    worker.stop()
    assert ran(r)[0] == ["hooked", 42, "eur", "x"]
    assert ran(r)[1][:2] == ["after_succeeded", [42, "eur"]]  # keywords: helper "kwargs"'s hooks


def test_a_declared_active_jobs_keywords_reach_rails_perform_as_keywords(rails, r, redis_url, default_client):
    jid = receipt_with_note.set(client=default_client).perform_async(43, "gbp", note="gift", copies=2)
    [pushed] = queued(r, "receipts")
    done, log = run_by_rails(r, redis_url)
    assert (done["job_class"], done["provider_job_id"]) == ("SendReceiptJob", jid), log
    assert done["args"] == [{"class": "Integer", "value": 43}, {"class": "String", "value": "gbp"}]
    assert done["kwargs"] == {":note": {"class": "String", "value": "gift"},
                              ":copies": {"class": "Integer", "value": 2}}
    assert "kwargs" not in pushed  # no field that neither side reads
    assert pushed["args"][0]["arguments"] == [43, "gbp", {"note": "gift", "copies": 2,
                                                          "_aj_ruby2_keywords": ["note", "copies"]}]


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_sidequest_runs_a_declared_active_job_with_its_keywords(r, start, default_client, runner):
    receipt_with_note.set(client=default_client).perform_async(44, "eur", note="gift", copies=3)
    worker = start(registry=DECLARED, queues=["receipts"], runner=runner)
    wait_until(lambda: ran(r) and r.llen("queue:receipts") == 0, 30, 0.05, "the job to run")
    worker.stop()
    assert ran(r) == [["receipt_with_note", 44, "eur", "gift", 3]]
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
