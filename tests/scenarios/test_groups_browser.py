"""A queue's groups and priority levels in a real browser (Debian's headless Chromium, driven by
Playwright): the Groups table largest first, a group named with a script shown as text, Pause and
Resume buttons that change the group. Screenshot: tests/artifacts/screenshots/queue-groups.png.

The browser, page and `sidequest web` fixtures are the dashboard tests' (tests/scenarios/test_web_browser.py).
"""

from __future__ import annotations

from lane_state import laned, scene

from scenarios.test_web_browser import SHOTS, XSS, _shoot, browser, page, web  # noqa: F401  (fixtures)
from sidequest.api import groups


def test_the_queue_page_lists_groups_and_pauses_one(page, web, client):  # noqa: F811
    scene(client, "mail")
    laned(client, "mail", 2_000, group="tenant-42", group_concurrency=2, group_rate=(100, 60))
    laned(client, "mail", 12, group=XSS)
    laned(client, "mail", 4, group="tenant-7", priority=2)

    page.goto(f"{web.url}/queues/mail")
    names = page.locator("#groups tbody td.lead")
    shown = [names.nth(i).text_content().strip() for i in range(names.count())]
    assert shown == ["tenant-42", XSS, "tenant-b", "tenant-a", "tenant-7", "tenant-c"]
    levels = page.locator("#levels .card .label").all_text_contents()
    assert levels == ["Priority 9", "Priority 5", "Priority 2", "Priority 0"]
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
