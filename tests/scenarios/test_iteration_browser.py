"""The Busy page in a real browser (test_web_browser's Chromium and `sidequest web`) while an
iterable job runs on a real worker process: its cursor, items done and time per item show."""

from __future__ import annotations

import re

import pytest
from conftest import STARTUP, wait_until
from jobs_for_tests import IterEveryItem

import sidequest
from scenarios.test_reliability import worker_factory
from scenarios.test_web_browser import SHOTS, browser, page, web  # noqa: F401  (fixtures)
from sidequest.api import Iteration, Stats
from sidequest.store import keys

HANDLED = "test:handled"


@pytest.fixture
def procs(redis_url, tmp_path):
    yield from worker_factory(redis_url, tmp_path)


def test_the_busy_page_shows_a_running_iterable_jobs_position(page, web, procs, client, r):  # noqa: F811
    jid = IterEveryItem.set(client=client).perform_async(1000, HANDLED, 0.1)
    procs()
    wait_until(lambda: Stats(client).workers_size == 1 and r.llen(HANDLED) >= 5, 2 * STARTUP, 0.05,
               "the heartbeat to show the running iterable job")

    page.goto(web.url + "/busy")
    cell = page.locator(f'.iteration[data-jid="{jid}"]')
    cell.wait_for(timeout=STARTUP * 1000)
    text = cell.inner_text()
    shown = int(re.search(r"cursor\s+(\d+)", text).group(1))
    state = Iteration.find(jid, client)
    assert state is not None and 4 <= shown <= state.cursor  # the cursor as of the page's read
    assert re.search(r"[\d,]+ items · \d+\.\d\d ms/item · slice 1", text), text
    assert "IterEveryItem" in page.locator("table").nth(1).inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "busy-iteration.png"), full_page=True)
    assert page.errors == []
    assert sidequest.cancel(jid, client)
    wait_until(lambda: r.hget(keys.iteration(jid), "state") == b"cancelled", STARTUP, 0.05,
               "the job to stop")
