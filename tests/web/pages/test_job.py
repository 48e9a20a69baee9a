"""The job page, `/jobs/<jid>`, over HTTP (Starlette's TestClient) with real jobs run by a real
in-process worker: where the job is (queue, scheduled, running on which process, retry, dead, done
with its result), its payload, its durable steps escaped and cut; the links to it from every page
that lists a job; its actions behind CSRF, auth and read-only; a clear 404; and a bounded search
(counted on the server with INFO commandstats)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import wait_until
from jobs_for_tests import compute, echo
from starlette.testclient import TestClient

import sidequest
from sidequest.api import DeadSet, ProcessSet, Queue, RetrySet, job_steps
from sidequest.client import sync_client
from sidequest.jobs import active_job
from sidequest.jobs.payload import new_jid
from sidequest.store import keys
from sidequest.web import create_app
from sidequest.web.pages.whereabouts import SEARCH_STEPS
from sidequest.web.security import COOKIE

XSS = "<script>alert(1)</script>"
HTML = {"Accept": "text/html"}
GATE = "test:jobpage:gate"


def _r():
    return sidequest.default_client().redis


class StepsToRetry(sidequest.Job, name="PageStepsToRetry", retry=5):
    """Two steps (a result holding markup, a long one), then a failure: it waits an hour in retry."""

    def retry_in(self, count, exc):
        return 3600

    def perform(self, order, note):
        sidequest.step("charge", lambda: {"id": f"ch-{order}", "note": XSS})
        sidequest.step("<b>receipt</b>", lambda: "r" * 500)
        raise RuntimeError(f"CRM said <no> to {order}")


@sidequest.job(name="PageStepsGated", retry=False)
def steps_gated(order):
    """Its first step is done; its second runs until the test sets GATE."""
    sidequest.step("first", lambda: order)

    def slow():
        while not _r().exists(GATE):
            threading.Event().wait(0.02)
        return "opened"

    sidequest.step("slow", slow)


@pytest.fixture
def worker(start, client, monkeypatch):
    """An in-process worker whose jobs' `sidequest.step` reaches the test Redis."""
    monkeypatch.setattr(sync_client, "_default", client)
    return start


@pytest.fixture
def http(client):
    return TestClient(create_app(client))


def _token(http: TestClient) -> str:
    http.get("/", headers=HTML)
    return http.cookies[COOKIE]


def _in_retry(client, worker) -> tuple[str, str]:
    """A job with two recorded steps, waiting in retry; (jid, its retry entry's key)."""
    worker()
    jid = client.push(StepsToRetry, [7, XSS])
    entry = wait_until(lambda: RetrySet(client).find_job(jid), 30, message="the job to fail into retry")
    return jid, entry.key


def test_a_job_in_retry_shows_its_place_payload_and_steps_as_text(http, client, worker):
    jid, key = _in_retry(client, worker)
    page = http.get(f"/jobs/{jid}", headers=HTML)
    assert page.status_code == 200
    text = page.text
    assert "<h1>PageStepsToRetry</h1>" in text and "data-job-state>retry<" in text
    assert 'action="/retries/actions"' in text and f'name="key" value="{key}"' in text  # its set's buttons
    assert "Retry count</dt><dd>0 of 5" in text
    assert "RuntimeError</strong>: CRM said &lt;no&gt; to 7" in text
    # arguments, a step's result and a step's name holding markup are text, never markup
    assert "<script>" not in text and "<b>receipt" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert '<tr data-step="&lt;b&gt;receipt&lt;/b&gt;">' in text
    steps = job_steps(jid, client)
    assert [(s.name, s.state) for s in steps.steps] == [("charge", "done"), ("<b>receipt</b>", "done")]
    # a long result is cut (200 characters and an ellipsis), never sent whole
    assert "&#34;" + "r" * 199 + "…</code>" in text and "r" * 200 not in text
    assert text.count(">done</span>") == 2


def test_every_page_that_lists_a_job_links_to_its_page(http, client, worker, r):
    jid, key = _in_retry(client, worker)
    link = f'href="/jobs/{jid}?in=retries&amp;key={key}"'
    assert link in http.get("/retries", headers=HTML).text
    assert link in http.get(f"/retries/{key}", headers=HTML).text
    assert link in http.get(f"/retries?q={jid}", headers=HTML).text  # a filter's results
    assert link in http.get("/retries?q=PageStepsToRetry&by=name", headers=HTML).text
    queued = client.push(echo, ["x"], queue="parked")
    assert f'href="/jobs/{queued}?queue=parked"' in http.get("/queues/parked", headers=HTML).text
    r.set(GATE + ":unused", 1)
    running = client.push(steps_gated, [1])
    wait_until(lambda: any(w.job.jid == running for w in sidequest.api.Workers(client)), 30,
               message="the heartbeat to show the running job")
    assert f'href="/jobs/{running}"' in http.get("/busy", headers=HTML).text
    r.set(GATE, 1)


def test_the_set_link_reads_one_entry_without_searching(http, client, worker, r):
    jid, key = _in_retry(client, worker)
    before = _calls(r, "zscan") + _calls(r, "lrange")
    page = http.get(f"/jobs/{jid}?in=retries&key={key}", headers=HTML)
    assert page.status_code == 200 and "data-job-state>retry<" in page.text
    assert _calls(r, "zscan") + _calls(r, "lrange") == before
    # a key that is stale (the entry moved) falls back to the search and still finds it
    stale = http.get(f"/jobs/{jid}?in=dead&key=1.5-{jid}", headers=HTML)
    assert stale.status_code == 200 and "data-job-state>retry<" in stale.text


def test_a_running_job_shows_its_process_and_its_running_step(http, client, worker, r):
    launcher = worker()
    jid = client.push(steps_gated, [3])
    wait_until(lambda: (s := job_steps(jid, client)) and any(x.name == "slow" for x in s.steps), 30,
               message="the second step to begin")
    wait_until(lambda: any(w.job.jid == jid for w in sidequest.api.Workers(client)), 30,
               message="the heartbeat to show the running job")
    text = http.get(f"/jobs/{jid}", headers=HTML).text
    assert "data-job-state>running<" in text and f">{launcher.identity}</a>" in text
    assert 'data-step="first"' in text and 'data-step="slow"' in text
    assert "accent\">running</span>" in text  # the step still running
    assert 'data-refresh="' in text  # a running job's page follows it live
    r.set(GATE, 1)
    wait_until(lambda: job_steps(jid, client) is None, 30, message="the job to end done (its steps removed)")
    wait_until(lambda: not any(w.job.jid == jid for w in sidequest.api.Workers(client)), 30,
               message="the heartbeat to drop the job from the running ones")
    gone = http.get(f"/jobs/{jid}", headers=HTML)
    assert gone.status_code == 404 and "leaves no trace" in gone.text


def test_queued_scheduled_dead_and_done_jobs(http, client, worker, r):
    queued = client.push(echo, [XSS], queue="idle")
    text = http.get(f"/jobs/{queued}?queue=idle", headers=HTML).text
    assert "data-job-state>queued<" in text and 'in queue <a href="/queues/idle">idle</a>' in text
    assert "&lt;script&gt;" in text and "<script>alert" not in text
    later = client.push(echo, ["later"], in_=3600)
    text = http.get(f"/jobs/{later}", headers=HTML).text
    assert "data-job-state>scheduled<" in text and 'action="/scheduled/actions"' in text and ">Run now<" in text
    dead = {"class": "Gone", "args": [1], "queue": "default", "jid": new_jid(), "retry": True, "created_at": 1.0,
            "failed_at": 2.0, "error_class": "KeyError", "error_message": "k"}
    r.zadd(keys.DEAD, {json.dumps(dead): time.time()})
    text = http.get(f"/jobs/{dead['jid']}", headers=HTML).text
    assert "data-job-state>dead<" in text and ">Retry now<" in text and ">Kill<" not in text
    worker()
    done = client.push(compute, [21])
    wait_until(lambda: sidequest.status(done, client=client) == "done", 30, message="compute to end")
    text = http.get(f"/jobs/{done}", headers=HTML).text
    assert "data-job-state>done<" in text and f'<h1 class="mono">{done}</h1>' in text  # no payload is kept
    assert '<pre class="block" data-result>{\n  &#34;n&#34;: 21,\n  &#34;double&#34;: 42,' in text


def test_an_activejob_shows_its_own_class_and_arguments(http, client, r):
    jid = new_jid()
    data = active_job.job_data_for("OrderMailer", [XSS, 5], None, queue="mailers", now=time.time(), job_id=jid)
    payload = {"class": active_job.RAILS_WRAPPER, "wrapped": "OrderMailer", "args": [data], "queue": "mailers",
               "jid": jid, "retry": True, "created_at": time.time(), "enqueued_at": time.time()}
    r.sadd(keys.QUEUES, "mailers")
    r.lpush(keys.queue("mailers"), json.dumps(payload))
    text = http.get(f"/jobs/{jid}", headers=HTML).text
    assert "<h1>OrderMailer</h1>" in text
    assert f'{active_job.RAILS_WRAPPER} <span class="muted">(runs OrderMailer)' in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "\n  5\n" in text


def test_actions_from_the_page_need_the_token_and_come_back_to_it(http, client, worker):
    jid, key = _in_retry(client, worker)
    assert http.post(f"/jobs/{jid}/actions", data={"do": "reset_steps", "step": "charge"}).status_code == 403
    assert http.post("/retries/actions", data={"do": "retry", "key": key, "job": jid}).status_code == 403
    assert len(job_steps(jid, client).steps) == 2 and RetrySet(client).size == 1
    token = _token(http)
    reset = http.post(f"/jobs/{jid}/actions", data={"do": "reset_steps", "step": "charge", "csrf": token},
                      follow_redirects=False)
    assert reset.status_code == 303 and reset.headers["location"] == f"/jobs/{jid}"
    assert [s.name for s in job_steps(jid, client).steps] == ["<b>receipt</b>"]
    assert "Forgot step “charge”" in http.get(reset.headers["location"], headers=HTML).text
    retried = http.post("/retries/actions", data={"do": "kill", "key": key, "job": jid, "csrf": token},
                        follow_redirects=False)
    assert retried.status_code == 303 and retried.headers["location"] == f"/jobs/{jid}"
    assert RetrySet(client).size == 0 and DeadSet(client).find_job(jid) is not None
    text = http.get(f"/jobs/{jid}", headers=HTML).text
    assert "Killed 1 job." in text and "data-job-state>dead<" in text
    everything = http.post(f"/jobs/{jid}/actions", data={"do": "reset_steps", "csrf": token}, follow_redirects=False)
    assert everything.status_code == 303 and job_steps(jid, client) is None
    assert http.post(f"/jobs/{jid}/actions", data={"do": "nope", "csrf": token}).status_code == 400


def test_read_only_auth_and_host_checks_hold_on_the_job_page(client, worker):
    jid, _ = _in_retry(client, worker)
    looking = TestClient(create_app(client, read_only=True))
    text = looking.get(f"/jobs/{jid}", headers=HTML).text
    assert "data-job-state>retry<" in text and "Reset steps" not in text and "Retry now" not in text
    assert looking.post(f"/jobs/{jid}/actions", data={"do": "reset_steps", "csrf": _token(looking)}).status_code == 403
    assert len(job_steps(jid, client).steps) == 2
    guarded = TestClient(create_app(client, basic_auth=("admin", "s3cret")))
    assert guarded.get(f"/jobs/{jid}").status_code == 401
    assert guarded.get(f"/jobs/{jid}", auth=("admin", "s3cret")).status_code == 200
    hosted = TestClient(create_app(client, allowed_hosts=["jobs.example.com"]), base_url="http://evil.example")
    assert hosted.get(f"/jobs/{jid}").status_code == 400


def test_an_unknown_jid_is_a_clear_404(http):
    missing = http.get(f"/jobs/{new_jid()}", headers=HTML)
    assert missing.status_code == 404 and "leaves no trace unless it was pushed with result_ttl" in missing.text
    too_long = http.get("/jobs/" + "a" * 101, headers=HTML)
    assert too_long.status_code == 404 and "not a job id" in too_long.text
    assert http.get(f"/jobs/{XSS}", headers=HTML).text.count("<script>") == 0


def test_the_search_is_bounded_on_a_big_queue(http, client, r):
    """A job at the far end of a 60,000-job queue: the page gives up after about SEARCH_STEPS reads and
    says so (LRANGE calls counted by the server)."""
    far = client.push(echo, ["far"], queue="big")
    filler = [json.dumps({"class": "Echo", "args": [i], "queue": "big", "jid": f"{i:024x}", "retry": True})
              for i in range(60_000)]
    for start in range(0, len(filler), 10_000):
        r.lpush(keys.queue("big"), *filler[start:start + 10_000])
    before = _calls(r, "lrange")
    page = http.get(f"/jobs/{far}?queue=big", headers=HTML)
    spent = _calls(r, "lrange") - before
    assert page.status_code == 404 and f"and {SEARCH_STEPS} more of 1,000 entries" in page.text
    assert SEARCH_STEPS <= spent <= SEARCH_STEPS + 8  # the bound: one read per key and SEARCH_STEPS more
    near = filler[-1]
    assert http.get(f"/jobs/{json.loads(near)['jid']}?queue=big", headers=HTML).status_code == 200
    assert Queue("big", client).size == 60_001


def _calls(r, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_processes_are_not_needed_to_see_a_stored_job(http, client):
    assert ProcessSet(client).size == 0
    jid = client.push(echo, [1])
    assert http.get(f"/jobs/{jid}", headers=HTML).status_code == 200
