"""The dashboard over HTTP (Starlette's TestClient, in-process): CSRF on every POST, basic auth,
the auth hook, read-only mode, escaping, the actions, paging a big set, /metrics, and the tasks
JSON API where it always was."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from conftest import STARTUP, wait_until
from helpers import beats, cpu_cost
from jobs_for_tests import FastBoom, Tick, echo, kw_echo, signup
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import sidequest
from sidequest import Client, Task
from sidequest.api import DeadSet, ProcessSet, Queue, RetrySet, ScheduledSet, Stats
from sidequest.features.periodic import PeriodicRegistry, PeriodicScheduler, forget
from sidequest.features.periodic import status as periodic_status
from sidequest.web import create_app
from sidequest.web.security import COOKIE

XSS = "<script>alert(1)</script>"
HTML = {"Accept": "text/html"}


def token_of(http: TestClient, path: str = "/") -> str:
    http.get(path, headers=HTML)
    return http.cookies[COOKIE]


def post(http: TestClient, path: str, token: str | None, **fields) -> object:
    data = dict(fields)
    if token is not None:
        data["csrf"] = token
    return http.post(path, data=data, follow_redirects=False)


def _failed_job(client, r, key: str, args: list, at: float, **extra) -> str:
    """A failed job stored straight into `retry` or `dead`, as a worker leaves it."""
    jid = extra.pop("jid", None) or f"{abs(hash((key, at))) % 16**24:024x}"
    payload = {"class": "Boom", "args": args, "queue": "default", "jid": jid, "retry": 2, "retry_count": 0,
               "created_at": at, "enqueued_at": at, "failed_at": at, "error_class": "ValueError",
               "error_message": "bad <i>input</i>", **extra}
    r.zadd(key, {json.dumps(payload): at})
    return jid


# -- CSRF ---------------------------------------------------------------------------------------
def concrete_post_paths(app: Starlette) -> list[str]:
    """Every route of the app as a concrete path, parameters filled in."""
    paths = []
    for route in app.routes:
        path = getattr(route, "path", "")
        paths.append(re.sub(r"\{[^}]+\}", "x", path) or "/")
    return paths


def test_every_post_without_a_valid_token_is_refused(client, r):
    client.push(echo, ["keep"], in_=600)
    app = create_app(client)
    http = TestClient(app)
    paths = [*concrete_post_paths(app), "/no/such/page", "/retries/actions", "/scheduled/actions",
             "/dead/actions", "/queues/actions", "/busy/actions", "/static/sidequest.css", "/metrics"]
    assert len(paths) > 15
    for path in paths:  # no cookie, no field
        assert http.post(path, data={"do": "delete_all"}).status_code == 403, path
    token = token_of(http)
    for path in paths:  # the cookie alone, or with a wrong token, is not enough
        assert post(http, path, None, do="delete_all").status_code == 403, path
        assert post(http, path, token[:-1] + ("A" if token[-1] != "A" else "B"), do="delete_all").status_code == 403
        assert http.post(path, data={"do": "delete_all"}, headers={"X-CSRF-Token": "x" * 43}).status_code == 403
    for method in ("put", "patch", "delete"):
        assert getattr(http, method)("/scheduled/actions").status_code == 403
    assert ScheduledSet(client).size == 1
    # the right token, as a form field or a header, goes through
    assert post(http, "/scheduled/actions", token, do="delete_all").status_code == 303
    assert ScheduledSet(client).size == 0
    client.push(echo, ["again"], in_=600)
    response = http.post("/scheduled/actions", data={"do": "delete_all"}, headers={"X-CSRF-Token": token},
                         follow_redirects=False)
    assert response.status_code == 303 and ScheduledSet(client).size == 0


def test_pages_carry_the_token_and_a_get_never_acts(start, client, r):
    client.push(echo, ["keep"], in_=600)
    client.push(echo, ["waits"], queue="mail")
    http = TestClient(create_app(client))
    page = http.get("/scheduled", headers=HTML)
    token = http.cookies[COOKIE]
    assert f'<meta name="csrf-token" content="{token}">' in page.text
    assert f'name="csrf" value="{token}"' in page.text
    assert "HttpOnly" in page.headers["set-cookie"] and "SameSite=Strict" in page.headers["set-cookie"]
    assert http.get("/scheduled", headers=HTML).headers.get("set-cookie") is None  # one token per browser
    worker = start()
    wait_until(lambda: ProcessSet(client).size == 1)
    for path in ("/scheduled/actions?do=delete_all", "/queues/actions?name=mail&do=clear",
                 f"/busy/actions?do=stop_all&identity={worker.identity}"):
        assert http.get(path).status_code in (200, 404, 405)  # a page or nothing, never an action
    beats(r, worker.identity, 2)  # two heartbeats: a stop would have been read
    assert ScheduledSet(client).size == 1 and Queue("mail", client).size == 1 and not worker.heartbeat.quiet
    assert not worker.stopped.is_set()


# -- authentication and read-only -------------------------------------------------------------------
def test_basic_auth_guards_every_path(client):
    http = TestClient(create_app(client, basic_auth=("admin", "s3cret")))
    for path in ("/", "/retries", "/metrics", "/api/stats", "/static/sidequest.css", "/tasks/x"):
        refused = http.get(path)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
        assert http.get(path, auth=("admin", "wrong")).status_code == 401
        assert http.get(path, auth=("admin2", "s3cret")).status_code == 401
    assert http.get("/", auth=("admin", "s3cret")).status_code == 200
    assert http.get("/metrics", auth=("admin", "s3cret")).status_code == 200
    assert http.get("/", headers={"Authorization": "Basic !!notbase64"}).status_code == 401
    with pytest.raises(ValueError):
        create_app(client, basic_auth=("admin", ""))


def test_read_only_shows_no_buttons_and_refuses_every_post(client, r):
    client.push(echo, ["keep"], in_=600)
    _failed_job(client, r, "dead", [1], time.time())
    http = TestClient(create_app(client, read_only=True))
    for path in ("/", "/busy", "/queues", "/queues/default", "/retries", "/scheduled", "/dead"):
        page = http.get(path, headers=HTML)
        assert page.status_code == 200 and 'method="post"' not in page.text, path
    token = http.cookies[COOKIE]
    assert post(http, "/scheduled/actions", token, do="delete_all").status_code == 403
    assert "read-only" in post(http, "/dead/actions", token, do="delete_all").text
    assert ScheduledSet(client).size == 1 and DeadSet(client).size == 1


def test_the_host_applications_own_auth_hook(client):
    client.push(echo, ["keep"], in_=600)

    async def hook(request: Request):
        user = request.headers.get("x-user")
        if user == "admin":
            return True
        if user == "viewer":
            return "read-only"
        if user is None:
            return RedirectResponse("/login", status_code=302)
        return False

    http = TestClient(create_app(client, auth=hook))
    assert http.get("/", follow_redirects=False).headers["location"] == "/login"
    assert http.get("/", headers={"x-user": "mallory"}).status_code == 403
    viewer = http.get("/scheduled", headers={"x-user": "viewer", **HTML})
    assert viewer.status_code == 200 and 'method="post"' not in viewer.text
    token = http.cookies[COOKIE]
    assert http.post("/scheduled/actions", data={"do": "delete_all", "csrf": token},
                     headers={"x-user": "viewer"}).status_code == 403
    assert ScheduledSet(client).size == 1
    done = http.post("/scheduled/actions", data={"do": "delete_all", "csrf": token},
                     headers={"x-user": "admin"}, follow_redirects=False)
    assert done.status_code == 303 and ScheduledSet(client).size == 0


# -- escaping -----------------------------------------------------------------------------------------
def test_everything_shown_is_escaped(client, r):
    now = time.time()
    client.push(echo, [XSS, {"k": "<img src=x onerror=alert(2)>"}], queue="mail")
    retry_jid = _failed_job(client, r, "retry", [XSS], now + 60, error_message=XSS, tags=[XSS])
    _failed_job(client, r, "dead", [XSS], now, error_class="<b>Bad</b>")
    task = Task.create(XSS, meta={"note": XSS}, client=client)
    task.add(signup, 1)
    http = TestClient(create_app(client))
    retry_key = next(iter(RetrySet(client))).key
    dead_key = next(iter(DeadSet(client))).key
    pages = ["/", "/queues", "/queues/mail", "/retries", f"/retries/{retry_key}", "/dead", f"/dead/{dead_key}",
             f"/tasks/{task.id}", "/retries?q=alert"]
    for path in pages:
        text = http.get(path, headers=HTML).text
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>Bad" not in text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in http.get("/queues/mail", headers=HTML).text
    detail = http.get(f"/retries/{retry_key}", headers=HTML).text
    assert retry_jid in detail and "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert "&lt;b&gt;Bad&lt;/b&gt;" in http.get(f"/dead/{dead_key}", headers=HTML).text
    assert "&lt;script&gt;" in http.get(f"/tasks/{task.id}", headers=HTML).text


def test_a_jobs_keyword_arguments_are_shown_with_its_arguments(client, r):
    client.push(kw_echo, [1], {"template": XSS}, queue="mail")
    _failed_job(client, r, "dead", [2], time.time(), kwargs={"locale": "fr"})
    http = TestClient(create_app(client))
    dead_key = next(iter(DeadSet(client))).key
    listed = http.get("/queues/mail", headers=HTML).text
    assert "[1] {&#34;template&#34;: &#34;&lt;script&gt;" in listed and "<script>alert" not in listed
    detail = http.get(f"/dead/{dead_key}", headers=HTML).text
    assert "Keyword arguments" in detail and "&#34;locale&#34;: &#34;fr&#34;" in detail
    assert next(iter(DeadSet(client))).as_dict()["kwargs"] == {"locale": "fr"}
    [queued] = Queue("mail", client)
    assert (queued.args, queued.kwargs, queued.as_dict()["kwargs"]) == ([1], {"template": XSS}, {"template": XSS})


# -- actions ------------------------------------------------------------------------------------------
def test_set_actions_one_selected_and_all_matching(client, r):
    now = time.time()
    a = _failed_job(client, r, "retry", ["a"], now + 10)
    _failed_job(client, r, "retry", ["b"], now + 20, error_message="Timeout talking to upstream")
    _failed_job(client, r, "retry", ["c"], now + 30, error_message="Timeout again")
    _failed_job(client, r, "retry", ["d"], now + 40)
    http = TestClient(create_app(client))
    token = token_of(http)
    entries = {e.args[0]: e for e in RetrySet(client)}

    done = post(http, "/retries/actions", token, do="retry", key=entries["a"].key)
    assert done.status_code == 303 and done.headers["location"] == "/retries"
    assert Queue("default", client).find_job(a) is not None and RetrySet(client).size == 3
    assert "Retried 1 job." in http.get("/retries", headers=HTML).text  # the message, once
    assert "Retried 1 job." not in http.get("/retries", headers=HTML).text

    again = post(http, "/retries/actions", token, do="retry", key=entries["a"].key)  # someone got there first
    assert again.status_code == 303
    assert "already left" in http.get("/retries", headers=HTML).text

    filtered = http.get("/retries", params={"q": "Timeout"}, headers=HTML).text
    assert "2 entries match" in filtered
    killed = post(http, "/retries/actions", token, do="kill_all", q="Timeout", by="text")
    assert killed.headers["location"] == "/retries?q=Timeout&by=text"
    assert RetrySet(client).size == 1 and DeadSet(client).size == 2

    dead_keys = [e.key for e in DeadSet(client)]
    http.post("/dead/actions", data={"csrf": token, "do": "delete", "key": dead_keys})
    assert DeadSet(client).size == 0
    assert post(http, "/retries/actions", token, do="explode", key="1-x").status_code == 400
    assert post(http, "/dead/actions", token, do="kill", key="1-x").status_code == 400  # no kill in dead
    assert http.get("/retries/1.5-nothere", headers=HTML).status_code == 404
    assert http.get("/retries/garbage", headers=HTML).status_code == 404


# -- the retry pages, as Sidekiq's ------------------------------------------------------------------
def test_retries_list_the_soonest_first_and_show_the_effective_maximum(client, r):
    """Issue 28 item 14: the retry page said "Retry count 2 of True" for every `retry: true` job
    (Ruby's or Python's), and `/retries` listed the latest first where Sidekiq lists the soonest
    (its retries and scheduled pages read the set with ZRANGE; the dead page, newest first)."""
    now = time.time()
    later = _failed_job(client, r, "retry", ["later"], now + 600, retry=True, retry_count=2)
    soon = _failed_job(client, r, "retry", ["soon"], now + 60, retry=True, retry_count=2)
    middle = _failed_job(client, r, "retry", ["middle"], now + 300, retry=5, retry_count=1)
    http = TestClient(create_app(client))
    listing = http.get("/retries", headers=HTML).text
    assert listing.index(soon) < listing.index(middle) < listing.index(later)
    filtered = http.get("/retries", params={"q": "Boom", "by": "name"}, headers=HTML).text
    assert filtered.index(soon) < filtered.index(middle) < filtered.index(later)
    client.push(echo, ["in an hour"], in_=3600)
    client.push(echo, ["in a minute"], in_=60)
    scheduled = http.get("/scheduled", headers=HTML).text
    assert scheduled.index("in a minute") < scheduled.index("in an hour")
    old = _failed_job(client, r, "dead", ["old"], now - 600)
    new = _failed_job(client, r, "dead", ["new"], now - 60)
    dead = http.get("/dead", headers=HTML).text
    assert dead.index(new) < dead.index(old)  # the morgue stays newest first, as Sidekiq's

    def retry_count(entry_jid: str, http: TestClient = http) -> str:
        entry = RetrySet(client).find_job(entry_jid)
        page = http.get(f"/retries/{entry.key}", headers=HTML).text
        return re.sub(r"\s+", " ", re.search(r"<dt>Retry count</dt><dd>(.*?)</dd>", page, re.S).group(1)).strip()

    assert retry_count(soon) == "2 of 25"  # `retry: true`: Sidekiq's default maximum
    assert retry_count(middle) == "1 of 5"
    http = TestClient(create_app(Client(client.config.replace(max_retries=7))))
    assert retry_count(soon, http) == "2 of 7"  # ... or the one this dashboard's configuration sets


def test_queue_actions(client, r):
    jids = client.push_bulk(echo, [[1], [2], [3]], queue="mail")
    http = TestClient(create_app(client))
    token = token_of(http)
    post(http, "/queues/actions", token, name="mail", do="pause")
    assert Queue("mail", client).paused
    assert "paused" in http.get("/queues", headers=HTML).text
    post(http, "/queues/actions", token, name="mail", do="unpause")
    assert not Queue("mail", client).paused
    gone = post(http, "/queues/actions", token, name="mail", do="delete", jid=jids[1], page="1")
    assert gone.headers["location"] == "/queues/mail?page=1"
    assert [j.jid for j in Queue("mail", client)] == [jids[2], jids[0]]
    post(http, "/queues/actions", token, name="mail", do="clear")
    assert Queue("mail", client).size == 0


def test_quiet_and_stop_reach_the_process(start, client, r):
    worker = start()
    wait_until(lambda: ProcessSet(client).size == 1)
    http = TestClient(create_app(client))
    token = token_of(http, "/busy")
    assert worker.identity in http.get("/busy", headers=HTML).text
    post(http, "/busy/actions", token, do="quiet", identity=worker.identity)
    wait_until(lambda: worker.heartbeat.quiet, 15, message="the worker to go quiet")
    wait_until(lambda: next(iter(ProcessSet(client))).stopping, 15, message="the process to show as quiet")
    gone = post(http, "/busy/actions", token, do="stop", identity="nohost:1:abc")
    assert gone.status_code == 303 and "gone" in http.get("/busy", headers=HTML).text


# -- reading big sets ----------------------------------------------------------------------------------
def test_pages_stay_fast_with_100000_entries_in_a_set(private_redis, config):
    client = Client(config.replace(redis_url=private_redis.url(0)))
    r = client.redis
    now = time.time()
    pipe = r.pipeline(transaction=False)
    for start_at in range(0, 100_000, 10_000):
        batch = {}
        for i in range(start_at, start_at + 10_000):
            payload = {"class": "Boom", "args": [i], "queue": "default", "jid": f"{i:024x}", "retry_count": 0,
                       "error_class": "ValueError", "error_message": f"failure {i}", "failed_at": now}
            batch[json.dumps(payload)] = now + i
        pipe.zadd("retry", batch)
    pipe.execute()
    assert RetrySet(client).size == 100_000
    http = TestClient(create_app(client))
    http.get("/retries", headers=HTML)  # warm up templates
    for path in ("/retries", "/retries?page=2000", "/retries?page=4000", "/", "/api/stats"):
        cost, response = cpu_cost(lambda path=path: http.get(path, headers=HTML), private_redis)
        assert response.status_code == 200 and cost < 0.5, (path, cost)
    last_page = http.get("/retries?page=4000", headers=HTML).text  # soonest first, as Sidekiq's
    assert "[99999]" in last_page and "[99975]" in last_page and "page 4,000 / 4,000" in last_page
    first_page = http.get("/retries", headers=HTML).text
    assert "[0]" in first_page
    key = next(iter(RetrySet(client))).key
    cost, response = cpu_cost(lambda: http.get(f"/retries/{key}", headers=HTML), private_redis)
    assert response.status_code == 200 and cost < 0.5, cost


def test_security_headers_and_a_redis_outage(client):
    http = TestClient(create_app(client))
    page = http.get("/", headers=HTML)
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    from sidequest import Client, Config

    down = TestClient(create_app(Client(Config(redis_url="redis://127.0.0.1:1/0"))))
    for path in ("/", "/api/stats", "/retries", "/metrics"):
        response = down.get(path, headers=HTML)
        assert response.status_code == 503 and "Redis does not answer" in response.text, path


# -- live updates ------------------------------------------------------------------------------------
def test_stats_json_and_page_fragments(client):
    client.push_bulk(echo, [[1], [2]], queue="mail")
    http = TestClient(create_app(client, poll_interval=1.5))
    stats = http.get("/api/stats").json()
    assert stats["enqueued"] == 2 and stats["queues"][0]["name"] == "mail" and stats["queues"][0]["size"] == 2
    assert set(stats) >= {"processed", "failed", "busy", "retries", "scheduled", "dead", "processes", "time"}
    page = http.get("/queues", headers=HTML).text
    assert 'data-poll="1500"' in page and "<html" in page
    fragment = http.get("/queues", headers={"X-Sidequest-Fragment": "1"}).text
    assert "<html" not in fragment and "mail" in fragment and "<table" in fragment


# -- mounted in a host application -----------------------------------------------------------------------
def test_mounted_under_a_prefix(client):
    client.push(echo, ["keep"], in_=600)
    host = Starlette(routes=[Route("/", lambda request: RedirectResponse("/admin/jobs/")),
                             Mount("/admin/jobs", create_app(client))])
    http = TestClient(host)
    page = http.get("/admin/jobs/scheduled", headers=HTML)
    assert page.status_code == 200 and 'href="/admin/jobs/retries"' in page.text
    assert 'src="/admin/jobs/static/sidequest.js?v=' in page.text and 'data-root="/admin/jobs"' in page.text
    assert "Path=/admin/jobs" in page.headers["set-cookie"]
    assert http.get("/admin/jobs/static/sidequest.css").status_code == 200
    token = http.cookies[COOKIE]
    done = http.post("/admin/jobs/scheduled/actions", data={"do": "delete_all", "csrf": token},
                     follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/admin/jobs/scheduled"
    assert ScheduledSet(client).size == 0


# -- the tasks JSON API, where it was -------------------------------------------------------------------
def test_tasks_json_api_keeps_its_paths_and_html_is_for_browsers(client):
    task = Task.create("json", client=client)
    task.add_bulk(signup, [[1], [2]])
    http = TestClient(create_app(client))
    assert http.get(f"/tasks/{task.id}").json()["total"] == 2
    assert http.get(f"/tasks/{task.id}", headers={"Accept": "application/json"}).json()["id"] == task.id
    events = http.get(f"/tasks/{task.id}/events", params={"limit": 1}).json()
    assert len(events["events"]) == 1
    assert http.get(f"/api/tasks/{task.id}", headers=HTML).json()["id"] == task.id
    assert http.get("/tasks/ffffffffffffffffffffffff").status_code == 404
    page = http.get(f"/tasks/{task.id}", headers=HTML)
    assert page.headers["content-type"].startswith("text/html") and "json" in page.text
    assert "enqueued" in http.get(f"/tasks/{task.id}?status=enqueued", headers=HTML).text
    assert http.get("/tasks/ffffffffffffffffffffffff", headers=HTML).status_code == 404
    found = http.get("/tasks", params={"id": task.id}, headers=HTML, follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == f"/tasks/{task.id}"
    assert f'href="/tasks/{task.id}"' in http.get("/tasks", headers=HTML).text  # listed, as every new task is
    missing = http.get("/tasks", params={"id": "<nope>"}, headers=HTML)
    assert "No task &lt;nope&gt;" in missing.text


def test_tasks_page_lists_recent_tasks_newest_first_paged(client):
    done = Task.create("import <b>products</b>", client=client)
    done.seal()  # an empty sealed task is complete at once
    assert Task.find(done.id, client=client).status()["done"]
    running = Task.create("resize images", client=client)
    running.add_bulk(signup, [[1], [2], [3]])
    http = TestClient(create_app(client))  # a browser that never opened either
    page = http.get("/tasks", headers=HTML).text
    assert page.index(f'href="/tasks/{running.id}"') < page.index(f'href="/tasks/{done.id}"')
    assert "import &lt;b&gt;products&lt;/b&gt;" in page and "<b>products" not in page
    row = page[page.index(f'href="/tasks/{done.id}"'):]
    assert "done" in row[:400]
    assert 'aria-valuenow="0.0"' in page and "Recent tasks" in page
    for i in range(30):
        Task.create(f"bulk {i}", client=client)
    first, second = http.get("/tasks", headers=HTML).text, http.get("/tasks?page=2", headers=HTML).text
    assert "bulk 29" in first and "bulk 5" in first and "bulk 4" not in first
    assert "bulk 4" in second and "resize images" in second and "26\u201332 of 32" in second
    assert "bulk 29" not in second


# -- periodic entries ------------------------------------------------------------------------------------
def test_periodic_page_lists_the_entries_schedulers_described(client):
    registry = PeriodicRegistry()  # a worker's: the dashboard's process registered nothing
    entry = sidequest.periodic("0 9 1 1 *", Tick, args=["x"], tz="Europe/Paris", queue="reports",
                               id="<b>new year</b>", registry=registry)
    scheduler = PeriodicScheduler(client, registry.entries)
    tick = datetime(2026, 1, 1, 9, 0, tzinfo=ZoneInfo("Europe/Paris")).timestamp()
    scheduler.run_due(tick - 60)
    assert scheduler.run_due(tick + 0.2) == 1
    [described] = periodic_status(client, registry=PeriodicRegistry())
    http = TestClient(create_app(client))
    assert 'href="/periodic"' in http.get("/", headers=HTML).text  # in the nav of every page
    page = http.get("/periodic", headers=HTML)
    assert page.status_code == 200 and 'aria-current="page"' in page.text
    text = page.text
    assert "&lt;b&gt;new year&lt;/b&gt;" in text and "<b>new year" not in text
    assert "0 9 1 1 * Europe/Paris" in text and ">Tick<" in text and "reports" in text
    assert described.last_jid and described.last_jid in text
    assert "2026-01-01 08:00:00 UTC" in text  # the last run (09:00 in Paris)
    assert datetime.fromtimestamp(entry.schedule.next_after(time.time()), UTC).strftime("%Y-%m-%d %H:%M") in text
    assert forget(entry.id, client)
    assert "No periodic entries" in http.get("/periodic", headers=HTML).text


# -- Prometheus ------------------------------------------------------------------------------------------
def scrape(http: TestClient) -> dict[str, list]:
    response = http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {family.name: family.samples for family in text_string_to_metric_families(response.text)}


def test_metrics_in_prometheus_text_format(start, client, r):
    client.push_bulk(echo, [[i] for i in range(5)], queue="mail")
    Queue("mail", client).pause()
    start()
    client.push_bulk(echo, [[i] for i in range(7)])
    client.push(FastBoom, ["no"])
    wait_until(lambda: DeadSet(client).size == 1 and Stats(client).processed >= 10, 30, message="jobs to run")
    http = TestClient(create_app(client))

    def job_samples(name: str) -> dict[str, float]:
        return {s.labels["job"]: s.value for s in scrape(http)[name]}

    wait_until(lambda: job_samples("sidequest_job_processed").get("Echo") == 7, 30,
               message="the heartbeat to write the per-job counts")
    families = scrape(http)
    assert all(name.startswith("sidequest_") for name in families)
    assert {"sidequest_processed", "sidequest_failed", "sidequest_queue_size", "sidequest_queue_latency_seconds",
            "sidequest_busy", "sidequest_retries", "sidequest_dead", "sidequest_processes",
            "sidequest_job_processed", "sidequest_job_failed"} <= set(families)
    sizes = {s.labels["queue"]: s.value for s in families["sidequest_queue_size"]}
    assert sizes["mail"] == 5 and sizes["default"] == 0
    assert {s.labels["queue"]: s.value for s in families["sidequest_queue_paused"]}["mail"] == 1
    assert families["sidequest_dead"][0].value == 1 and families["sidequest_processes"][0].value == 1
    assert families["sidequest_processed"][0].name == "sidequest_processed_total"
    assert job_samples("sidequest_job_failed")["FastBoom"] == 3  # the first run and two retries
    client.push_bulk(echo, [[i] for i in range(4)])  # counters only grow
    wait_until(lambda: job_samples("sidequest_job_processed")["Echo"] == 11, 30, message="four more runs")
    assert job_samples("sidequest_job_processed")["Echo"] == 11


# -- the `sidequest web` command ------------------------------------------------------------------------
def test_web_command_flags(redis_url, tmp_path):
    import subprocess

    import httpx
    from click.testing import CliRunner
    from conftest import PYTHON, free_port, python_env

    from sidequest.cli import main

    bad = CliRunner().invoke(main, ["web", "--basic-auth", "nopassword", "--redis-url", redis_url])
    assert bad.exit_code == 2 and "USER:PASSWORD" in bad.output

    port = free_port()
    log = (tmp_path / "web.log").open("w")
    proc = subprocess.Popen([PYTHON, "-m", "sidequest.cli", "web", "--port", str(port), "--redis-url", redis_url,
                             "--root-path", "/ops/jobs", "--read-only"],
                            env=python_env(SIDEQUEST_WEB_BASIC_AUTH="admin:s3cret"), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"

        def answers() -> int:
            try:
                return httpx.get(base + "/api/stats", timeout=1).status_code
            except httpx.HTTPError:
                return 0
        assert wait_until(answers, STARTUP, 0.05, "sidequest web to answer") == 401
        page = httpx.get(base + "/queues", auth=("admin", "s3cret"), headers=HTML)
        assert page.status_code == 200 and 'href="/ops/jobs/retries"' in page.text  # links for the proxy's path
        assert "Read-only" in page.text
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert "with basic auth" in (tmp_path / "web.log").read_text()


def test_web_on_a_busy_port_says_so_in_one_line_before_announcing_anything(redis_url):
    import socket
    import subprocess

    from conftest import PYTHON, python_env

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([PYTHON, "-m", "sidequest.cli", "web", "--port", str(port), "--redis-url", redis_url],
                             env=python_env(), capture_output=True, text=True, timeout=30)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, lines
    assert f"port {port}" in lines[0] and "--port" in lines[0] and "dashboard on" not in lines[0]


def test_web_refuses_a_host_it_does_not_answer_to(client, r, redis_url, tmp_path):
    """Issue 28 item 11: `sidequest web` (127.0.0.1, no auth by default) took any `Host`, so a page
    of a DNS-rebound name could read the CSRF token and act: a queue clear sent with
    `Host: evil.example` emptied the queue. Now a name it does not answer to gets 400; addresses,
    the loopback names and `--allowed-host` names are served."""
    import subprocess

    import httpx
    from conftest import PYTHON, free_port, python_env

    client.push_bulk(echo, [[1], [2]], queue="mail")
    port = free_port()
    log = (tmp_path / "web.log").open("w")
    proc = subprocess.Popen([PYTHON, "-m", "sidequest.cli", "web", "--port", str(port), "--redis-url", redis_url,
                             "--allowed-host", "jobs.example.com"], env=python_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"

        def answers() -> int:
            try:
                return httpx.get(base + "/api/stats", timeout=1).status_code
            except httpx.HTTPError:
                return 0
        assert wait_until(answers, STARTUP, 0.05, "sidequest web to answer") == 200
        with httpx.Client(base_url=base, headers={"Host": "evil.example"}) as rebound:
            page = rebound.get("/queues", headers=HTML)
            assert page.status_code == 400 and COOKIE not in page.cookies and "csrf" not in page.text
            token = httpx.get(base + "/queues", headers=HTML).cookies[COOKIE]  # even with a real token
            cleared = rebound.post("/queues/actions", data={"name": "mail", "do": "clear", "csrf": token},
                                   cookies={COOKIE: token})
            assert cleared.status_code == 400
        assert Queue("mail", client).size == 2
        served = (f"localhost:{port}", f"127.0.0.1:{port}", "jobs.example.com", "JOBS.example.com.", f"[::1]:{port}")
        for host in served:
            assert httpx.get(base + "/queues", headers={**HTML, "Host": host}).status_code == 200, host
        for host in ("jobs.example.com.evil.example", "localhost.evil.example", ""):
            assert httpx.get(base + "/queues", headers={**HTML, "Host": host}).status_code == 400, host
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_a_mounted_dashboard_checks_hosts_only_when_asked(client):
    """Issue 28 item 11: `create_app()` mounted in an application leaves Host to the host
    application's own checks (Django's ALLOWED_HOSTS, a proxy); `allowed_hosts=` adds the check."""
    assert TestClient(create_app(client), base_url="http://evil.example").get("/").status_code == 200
    guarded = create_app(client, allowed_hosts=["*.example.com"])
    assert TestClient(guarded, base_url="http://evil.example").get("/").status_code == 400
    assert TestClient(guarded, base_url="http://jobs.example.com").get("/").status_code == 200
    assert TestClient(guarded, base_url="http://10.1.2.3:8080").get("/").status_code == 200
