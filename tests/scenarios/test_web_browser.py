"""The dashboard in a real browser: Debian's headless Chromium, driven by Playwright, against a
`sidequest web` subprocess showing real data made by a real in-process worker.

Every page renders on a laptop and on a phone (screenshots in tests/artifacts/screenshots/), the
buttons change what they say they change, a forged POST is refused, a job argument holding a
script shows as text and runs nothing, and the numbers move without a reload.

Without Chromium (`apt-get install chromium`) or Playwright these tests skip, or fail when
SIDEQUEST_REQUIRE_BROWSER=1 (CI sets it). Playwright never downloads a browser here: it drives
/usr/bin/chromium.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT, STARTUP, free_port, python_env, wait_until
from jobs_for_tests import FastBoom, boom, echo, signup, work

import sidequest
from sidequest import Task
from sidequest.api import DeadSet, Queue, RetrySet, ScheduledSet, Stats
from sidequest.features.periodic import PeriodicRegistry, PeriodicScheduler

REQUIRE_BROWSER = os.environ.get("SIDEQUEST_REQUIRE_BROWSER") == "1"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = ROOT / "tests" / "artifacts" / "screenshots"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
XSS = "<script>alert(1)</script>"
GATE = "test:gate"  # the running `work` job ends once this key exists


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    missing = _browser_missing()
    if missing:
        if REQUIRE_BROWSER:
            pytest.fail(f"the browser tests are required (SIDEQUEST_REQUIRE_BROWSER=1): {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class WebServer:
    """`sidequest web` as a real subprocess on a free port."""

    def __init__(self, redis_url: str, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="sq-web-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "sidequest.cli", "web", "--port", str(self.port), "--redis-url", redis_url,
             "--poll-interval", "0.5", *args],
            env=python_env(), stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._answers, STARTUP, 0.05, "sidequest web to answer")
        except BaseException:  # no fixture will stop a server that never answered: do it here
            self.stop()
            raise

    def _answers(self) -> bool:
        import httpx

        assert self.proc.poll() is None, Path(self.log.name).read_text()
        try:
            return httpx.get(self.url + "/api/stats", timeout=1).status_code in (200, 401)
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        print(Path(self.log.name).read_text(errors="replace"))  # shown when a test fails
        os.unlink(self.log.name)


@pytest.fixture
def web(redis_url: str) -> Iterator[WebServer]:
    server = WebServer(redis_url)
    yield server
    server.stop()


@pytest.fixture
def seeded(start, client, r):
    """A worker that has run, failed, retried, killed and is running jobs; a task; queues, one paused."""
    worker = start(concurrency=4)
    client.push_bulk(echo, [[i] for i in range(20)])
    for queue in ("mail", "images", "reports"):
        client.push_bulk(echo, [[queue, i] for i in range(3)], queue=queue)
    client.push(echo, [XSS, {"note": "<b>bold</b>"}], queue="mail")
    Queue("images", client).pause()
    client.push(echo, ["tomorrow"], in_=3600)
    client.push(echo, ["later"], in_=7200)
    client.push(boom, ["upstream said <no>"])
    client.push(FastBoom, [XSS])
    client.push(FastBoom, ["out of retries"])
    task = Task.create("import 12 products", meta={"seller": 42}, client=client)
    task.add_bulk(signup, [[i] for i in range(1, 13)])
    task.seal()
    client.push(work, [1, 120, GATE])  # `blocker` would not do: redis-py 8 cuts its BLPOP after 5 s
    wait_until(lambda: DeadSet(client).size == 2, 30, 0.05, "FastBoom to die")
    wait_until(lambda: RetrySet(client).size == 1, 30, 0.05, "Boom to wait for a retry")
    # its retry is due in 15-24 s, which a busy machine reaches mid-test: move it an hour away
    assert next(iter(RetrySet(client))).reschedule(time.time() + 3600)
    wait_until(lambda: Task.find(task.id, client=client).status()["done"], 30, 0.05, "the task to end")
    wait_until(lambda: Stats(client).workers_size == 1 and Stats(client).processed >= 30, 30, 0.05,
               "the heartbeat to show the running job and the counts")
    yield {"worker": worker, "task": task}
    r.set(GATE, 1)


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh browser context (its own cookies) and page that records dialogs and script errors."""
    context = browser.new_context(viewport=LAPTOP)
    tab = context.new_page()
    tab.dialogs = []
    tab.errors = []

    def on_dialog(dialog) -> None:
        tab.dialogs.append((dialog.type, dialog.message))
        dialog.accept()  # confirm() of our own buttons: yes

    tab.on("dialog", on_dialog)
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    tab.on("console", lambda msg: tab.errors.append(msg.text) if msg.type == "error" else None)
    yield tab
    context.close()


def _shoot(tab, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.wait_for_timeout(150)  # charts draw after the first layout
    tab.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_every_page_renders_on_a_laptop_and_a_phone(page, web, seeded, client):
    task = seeded["task"]
    dead_key = next(e.key for e in DeadSet(client) if e.args == [XSS])
    retry_key = next(iter(RetrySet(client))).key
    pages = {
        "dashboard": ("/", "Dashboard"),
        "busy": ("/busy", "Busy"),
        "queues": ("/queues", "Queues"),
        "queue": ("/queues/mail", "mail"),
        "retries": ("/retries", "Retries"),
        "retry-job": (f"/retries/{retry_key}", "Boom"),
        "scheduled": ("/scheduled", "Scheduled"),
        "dead": ("/dead", "Dead"),
        "dead-job": (f"/dead/{dead_key}", "FastBoom"),
        "job-metrics": ("/job-metrics", "Job metrics"),
        "job-metric": ("/job-metrics/Echo", "Echo"),
        "task": (f"/tasks/{task.id}", "import 12 products"),
        "tasks": ("/tasks", "Tasks"),  # lists the recent tasks, the seeded one too
        "periodic": ("/periodic", "Periodic"),
    }
    registry = PeriodicRegistry()  # a worker's entries, as its scheduler describes them in Redis
    sidequest.periodic("30 6 * * 1-5", echo, args=["daily"], tz="Europe/Paris", queue="reports",
                       registry=registry)
    sidequest.periodic(job=echo, every=60, args=["<b>minutely</b>"], id="<b>minutely</b>", registry=registry)
    scheduler = PeriodicScheduler(client, registry.entries)
    now = time.time()
    scheduler.run_due(now - 120)
    scheduler.run_due(now)
    for size_name, size in (("desktop", LAPTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        for name, (path, heading) in pages.items():
            response = page.goto(web.url + path)
            assert response.status == 200, path
            assert page.locator("h1").first.inner_text() == heading, path
            if name == "dashboard":  # let the live charts gather a few readings
                page.wait_for_selector("#chart-rate path.line", state="attached")
            _shoot(page, f"{name}-{size_name}")
    assert page.errors == []

    page.set_viewport_size(LAPTOP)
    page.goto(web.url + "/busy")
    assert "Work" in page.inner_text("main") and "quiet" not in page.inner_text("main table")
    page.goto(web.url + f"/tasks/{task.id}?status=failed")
    failed_rows = page.locator("main tbody tr")
    assert failed_rows.count() == 4 and "seller is not qualified" in failed_rows.first.inner_text()
    page.goto(web.url + "/job-metrics")
    assert "Echo" in page.inner_text("main table") and "FastBoom" in page.inner_text("main table")
    page.goto(web.url + "/tasks")
    row = page.locator("main tbody tr", has_text="import 12 products")
    assert row.count() == 1 and "done" in row.inner_text() and "100" in row.inner_text()
    page.get_by_role("link", name="import 12 products").click()
    page.wait_for_url(re.compile(f"/tasks/{task.id}$"))
    page.get_by_role("link", name="Periodic").click()
    page.wait_for_url(re.compile(r"/periodic$"))
    rows = page.locator("main tbody tr")
    assert rows.count() == 2 and "<b>minutely</b>" in page.inner_text("main table")
    assert "30 6 * * 1-5 Europe/Paris" in page.inner_text("main table")


def test_a_script_in_a_job_argument_shows_as_text_and_runs_nothing(page, web, seeded, client):
    dead = next(e for e in DeadSet(client) if e.args == [XSS])
    for path in ("/queues/mail", "/dead", f"/dead/{dead.key}", "/busy"):
        page.goto(web.url + path)
        page.wait_for_timeout(600)  # a live refresh too
    page.goto(web.url + "/queues/mail")
    assert XSS in page.inner_text("main")
    page.goto(web.url + f"/dead/{dead.key}")
    assert XSS in page.inner_text("main pre") and f"ValueError: {XSS}" in page.inner_text("main")
    assert page.evaluate("document.querySelectorAll('main script:not([type])').length") == 0
    assert page.dialogs == [] and page.errors == []


def test_numbers_and_durations_update_without_a_reload(page, web, seeded, client):
    page.goto(web.url + "/")
    page.evaluate("window.__sameDocument = true")
    processed = page.locator(".card [data-stat=processed]")
    before = int(processed.inner_text().replace(",", ""))
    client.push_bulk(echo, [["live", i] for i in range(25)])
    wait_until(lambda: int(processed.inner_text().replace(",", "")) >= before + 25, 15, 0.1,
               "the processed card to count the new jobs")
    page.wait_for_selector("#chart-rate path.line", state="attached", timeout=30_000)
    assert page.evaluate("window.__sameDocument") is True

    page.goto(web.url + "/busy")
    page.evaluate("window.__sameDocument = true")
    since = page.locator("[data-since]").first
    first = since.inner_text()
    wait_until(lambda: since.inner_text() != first, 15, 0.1, "the running job's duration to tick")
    Queue("reports", client).clear()  # the nav's Enqueued badge follows
    badge = page.locator("nav [data-stat=enqueued]")
    wait_until(lambda: badge.inner_text() == str(Stats(client).enqueued), 30, 0.1, "the nav badge to follow")
    assert page.evaluate("window.__sameDocument") is True


def test_the_buttons_work(page, web, seeded, client, r):
    # retry one from its detail page
    entry = next(iter(RetrySet(client)))
    page.goto(web.url + f"/retries/{entry.key}")
    page.get_by_role("button", name="Retry now").click()
    page.wait_for_url(re.compile(r"/retries$"))
    assert "Retried 1 job" in page.inner_text(".flash")
    assert RetrySet(client).size in (0, 1) and RetrySet(client).get(entry.key) is None

    # delete one dead job, confirmed in the dialog
    dead = next(e for e in DeadSet(client) if e.args != [XSS])
    page.goto(web.url + f"/dead/{dead.key}")
    page.get_by_role("button", name="Delete").click()
    page.wait_for_url(re.compile(r"/dead$"))
    assert ("confirm", "Delete this job?") in page.dialogs
    assert DeadSet(client).get(dead.key) is None and DeadSet(client).size == 1

    # kill the ticked scheduled jobs
    page.goto(web.url + "/scheduled")
    page.locator("input[data-select-all]").check()
    page.get_by_role("button", name="Kill", exact=True).click()
    page.wait_for_url(re.compile(r"/scheduled$"))
    assert ("confirm", "Move the selected jobs to the dead set?") in page.dialogs
    assert "Killed 2 jobs" in page.inner_text(".flash")
    assert ScheduledSet(client).size == 0 and DeadSet(client).size == 3

    # pause and resume a queue; delete one job from a queue
    page.goto(web.url + "/queues")
    row = page.locator("tr", has=page.get_by_role("link", name="reports", exact=True))
    row.get_by_role("button", name="Pause").click()
    wait_until(lambda: Queue("reports", client).paused, 15, 0.05, "the queue to be paused")
    row = page.locator("tr", has=page.get_by_role("link", name="reports", exact=True))
    row.get_by_role("button", name="Resume").click()
    wait_until(lambda: not Queue("reports", client).paused, 15, 0.05, "the queue to be resumed")
    page.goto(web.url + "/queues/reports")
    sizes = Queue("reports", client).size
    page.locator("main tbody tr").first.get_by_role("button", name="Delete").click()
    page.wait_for_url(re.compile(r"/queues/reports"))
    assert "Deleted 1 job" in page.inner_text(".flash") and Queue("reports", client).size == sizes - 1

    # quiet the worker process: the page shows it without a reload
    page.goto(web.url + "/busy")
    page.get_by_role("button", name="Quiet", exact=True).click()
    page.wait_for_url(re.compile(r"/busy$"))
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector("main table .tag.warn:text('quiet')", timeout=30_000)
    assert page.evaluate("window.__sameDocument") is True
    assert seeded["worker"].heartbeat.quiet is True


def test_forged_and_read_only_posts_are_refused(browser, page, redis_url, client, r):
    client.push(echo, ["keep me"], in_=600)
    server = WebServer(redis_url)
    try:
        page.goto(server.url + "/scheduled")
        status = page.evaluate("""async () => (await fetch('/scheduled/actions', {method: 'POST',
            headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'do=delete_all'})).status""")
        assert status == 403
        token = page.locator("meta[name=csrf-token]").get_attribute("content")
        forged = page.evaluate("""async (token) => (await fetch('/scheduled/actions', {method: 'POST',
            headers: {'Content-Type': 'application/x-www-form-urlencoded'},
            body: 'do=delete_all&csrf=' + token.slice(1) + 'x'})).status""", token)
        assert forged == 403

        # a page of another origin posting a form to the dashboard: no cookie goes, no token
        other = browser.new_page()
        other.set_content(f"""<form method="post" action="{server.url}/scheduled/actions">
            <input name="do" value="delete_all"><button>go</button></form>""")
        with other.expect_navigation():
            other.click("button")
        assert "CSRF" in other.inner_text("body")
        other.close()
        assert ScheduledSet(client).size == 1
    finally:
        server.stop()

    read_only = WebServer(redis_url, "--read-only")
    try:
        page.goto(read_only.url + "/scheduled")
        assert "Read-only" in page.inner_text(".flash") and page.locator("main button").count() == 1  # Filter
        token = page.locator("meta[name=csrf-token]").get_attribute("content")
        status = page.evaluate("""async (token) => (await fetch('/scheduled/actions', {method: 'POST',
            headers: {'Content-Type': 'application/x-www-form-urlencoded', 'X-CSRF-Token': token},
            body: 'do=delete_all'})).status""", token)
        assert status == 403 and ScheduledSet(client).size == 1
    finally:
        read_only.stop()
    assert json.loads(r.zrange("schedule", 0, -1)[0])["args"] == ["keep me"]


def test_the_latency_chart_shows_the_queues_on_first_paint(page, web, client):
    """Issue 28 item 14: the queue-latency chart said "no queues" until the first `/api/stats`
    reading came back, while the table below listed them; it is drawn from the page's own
    reading at once. `/api/stats` is held back here, so only the first paint shows."""
    client.push_bulk(echo, [[i] for i in range(3)], queue="mail")
    client.push(echo, ["report"], queue="reports")
    page.route("**/api/stats", lambda route: None)  # never answered: the page has only what it was served
    page.goto(web.url + "/")
    page.wait_for_selector("#chart-latency text", state="attached")
    _shoot(page, "dashboard-first-paint")
    table = page.inner_text("main table")
    assert "mail" in table and "reports" in table
    chart = page.locator("#chart-latency").text_content()
    assert "no queues" not in chart and "collecting" not in chart
    assert sorted(page.inner_text("#chart-latency-legend").split()) == ["mail", "reports"]
    assert page.locator("#chart-latency circle").count() == 2  # one reading each: a dot, not a line
    assert page.errors == []


def test_the_throughput_chart_starts_with_the_minutes_the_workers_ran(page, web, config, client, r):
    """Issue 42 item 2: opened after workers ran for 10 minutes, the throughput chart shows those
    10 minutes at once, from the per-minute metrics in Redis. `/api/stats` is held back here, so
    only the first paint shows (the screenshot: dashboard-throughput-history.png)."""
    from helpers import worked_for_minutes

    expected = worked_for_minutes(config, client, r, minutes=10)
    page.route("**/api/stats", lambda route: None)  # never answered: the page has only what it was served
    page.goto(web.url + "/")
    page.wait_for_selector("#chart-rate path.line", state="attached")
    _shoot(page, "dashboard-throughput-history")
    processed, failed = (page.locator("#chart-rate path.line").nth(i).get_attribute("d") for i in range(2))
    # a line through the hour's finished minutes (60, or 59 once the oldest one's middle has left
    # the hour): at 0 before the worker, then its 10 minutes
    assert processed.count("L") == failed.count("L") and processed.count("L") + 1 in (59, 60)
    ys = [float(step.split()[1]) for step in processed[1:].split("L")]
    zero = max(ys)  # y grows downwards
    drawn = [(zero - y) / (zero - min(ys)) for y in ys if y != zero]
    runs = [count for _, count, _ in expected]
    assert len(drawn) == 10 and all(abs(d - n / max(runs)) < 0.02 for d, n in zip(drawn, runs, strict=True))
    assert "collecting" not in page.locator("#chart-rate").text_content()
    assert "last hour" in page.inner_text("section:has(#chart-rate) .panel-head")
    assert page.inner_text("#chart-rate-legend").split() == ["processed/s", "failed/s"]
    assert page.errors == []


def test_the_latency_chart_starts_with_each_queues_waits_in_the_hour(page, web, config, client, r):
    """Issue 42 item 2: opened after a worker took jobs that had waited, the latency chart draws
    each queue's longest wait per minute of the hour at once, a gap where none of its jobs started,
    then the live reading (0: both queues are empty now). `/api/stats` is held back, so only the
    first paint shows (the screenshot: dashboard-latency-history.png)."""
    from helpers import waited_for_minutes

    found = waited_for_minutes(config, r, [{"default": 20.0, "mail": 5.0}, {"default": 40.0},
                                           {"mail": 60.0}, {"default": 10.0, "mail": 30.0}])
    page.route("**/api/stats", lambda route: None)  # never answered: the page has only what it was served
    page.goto(web.url + "/")
    page.wait_for_selector("#chart-latency path.line", state="attached")
    _shoot(page, "dashboard-latency-history")
    assert page.inner_text("#chart-latency-legend").split() == ["mail", "default"]  # the hour's longest first
    assert "last hour" in page.inner_text("section:has(#chart-latency) .panel-head")
    drawn = page.evaluate("""() => {
      const names = {}, out = {};
      document.querySelectorAll('#chart-latency-legend span').forEach(s => {
        names[s.querySelector('i').style.background] = s.textContent;
      });
      const add = (color, x, y) => (out[names[color]] = out[names[color]] || []).push([x, y]);
      document.querySelectorAll('#chart-latency path.line').forEach(p => {
        (p.getAttribute('d').match(/[ML][^ML]+/g) || []).forEach(step => {
          const [x, y] = step.slice(1).split(' ').map(Number);
          add(p.getAttribute('stroke'), x, y);
        });
      });
      document.querySelectorAll('#chart-latency circle').forEach(c => {
        add(c.getAttribute('fill'), +c.getAttribute('cx'), +c.getAttribute('cy'));
      });
      return out;
    }""")
    zero = max(y for points in drawn.values() for _, y in points)  # the live 0
    top = min(y for points in drawn.values() for _, y in points)  # the hour's longest wait (mail's 60 s)
    longest = max(seconds for _, waits in found for seconds in waits.values())
    for queue in ("mail", "default"):
        points = sorted({tuple(p) for p in drawn[queue]})  # left to right; a lone point is also a dot
        waits = [minute[queue] for _, minute in found if queue in minute] + [0.0]  # then the live reading
        assert len(points) == len(waits), (queue, points)
        heights = [(zero - y) / (zero - top) for _, y in points]
        assert all(abs(h - w / longest) < 0.02 for h, w in zip(heights, waits, strict=True)), (queue, heights, waits)
    assert page.errors == []
