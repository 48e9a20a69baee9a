"""A queue's groups and priority levels in a real browser (Debian's headless Chromium, driven by
Playwright): the Groups table largest first, a group named with a script shown as text, Pause and
Resume buttons that change the group. Screenshot: tests/artifacts/screenshots/queue-groups.png.

The browser, page and `sidequest web` fixtures are the dashboard tests' (tests/scenarios/test_web_browser.py).
"""

from __future__ import annotations

from lane_state import LaneState

from scenarios.test_web_browser import SHOTS, XSS, _shoot, browser, page, web  # noqa: F401  (fixtures)
from sidequest.api import groups


def test_the_queue_page_lists_groups_and_pauses_one(page, web, client):  # noqa: F811
    mail = LaneState(client, "mail")
    mail.waiting("tenant-42", 9_000)
    mail.running("tenant-42", 2)
    mail.limits("tenant-42", concurrency=2, count=100, period_ms=60_000)
    mail.waiting(XSS, 120, level=9)
    mail.waiting("tenant-7", 10)
    mail.running("tenant-7", 1)
    mail.waiting("", 30, level=0)
    client.push("Echo", [1], queue="mail")

    page.goto(f"{web.url}/queues/mail")
    names = page.locator("#groups tbody td.lead")
    assert [names.nth(i).text_content().strip() for i in range(names.count())] == ["tenant-42", XSS, "tenant-7"]
    assert page.locator("#levels .card .label").all_text_contents() == ["Priority 9", "Priority 5", "Priority 0"]
    assert page.locator("script:text('alert(1)')").count() == 0
    page.locator("#groups tr", has_text="tenant-7").get_by_role("button", name="Pause").click()
    page.wait_for_selector("#groups tr:has-text('tenant-7') .tag:text('paused')")
    assert [g.name for g in groups("mail", client=client) if g.paused] == ["tenant-7"]
    assert page.dialogs == [] and page.errors == []
    _shoot(page, "queue-groups")
    assert (SHOTS / "queue-groups.png").stat().st_size > 10_000
    page.locator("#groups tr", has_text="tenant-7").get_by_role("button", name="Resume").click()
    page.wait_for_selector("#groups tr:has-text('tenant-7') button:text('Pause')")
    assert [g.name for g in groups("mail", client=client) if g.paused] == []
