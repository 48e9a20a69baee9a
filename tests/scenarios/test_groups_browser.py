"""A queue's groups and priority levels in a real browser (Debian's headless Chromium, driven by
Playwright): the Groups table largest first, a group named with a script shown as text, Pause and
Resume buttons that change the group. Screenshot: tests/artifacts/screenshots/queue-groups.png.

The browser, page and `sidequest web` fixtures are the dashboard tests' (tests/scenarios/test_web_browser.py).
"""

from __future__ import annotations

from lane_state import laned, scene

from scenarios.test_web_browser import SHOTS, XSS, _shoot, browser, page, web  # noqa: F401  (fixtures)
from sidequest.api import groups, set_group_limits


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


def test_a_groups_limits_are_set_and_cleared_from_its_row(page, web, client):  # noqa: F811
    scene(client, "mail")
    laned(client, "mail", 300, group="tenant-42", group_concurrency=2, group_rate=(100, 60))
    set_group_limits("mail", "tenant-b", concurrency=0, client=client)  # lifted by an operator

    page.goto(f"{web.url}/queues/mail")
    row = page.locator("#groups tr", has_text="tenant-42")
    row.get_by_text("Limits").click()
    row.get_by_label("Weight of tenant-42").fill("3")
    row.get_by_label("Rate of tenant-42 (count/seconds)").fill("500/60")
    row.get_by_role("button", name="Set", exact=True).click()
    page.wait_for_selector(".flash.ok:text('Group tenant-42: weight 3, concurrency 2, rate 500 per 60 s')")
    weight = page.locator("#groups tr:has-text('tenant-42') td[data-label=Weight]")
    assert " ".join(weight.inner_text().split()) == "3 override Clear"
    assert [(g.weight, g.rate, g.overridden) for g in groups("mail", client=client) if g.name == "tenant-42"] == [
        (3, (500, 60.0), ("rate", "weight"))]
    page.locator("#groups tr", has_text="tenant-a").get_by_text("Limits").click()  # open, as an operator would
    page.locator("#groups tr", has_text="tenant-a").get_by_label("Weight of tenant-a").fill("many")
    assert page.dialogs == [] and page.errors == []
    _shoot(page, "queue-group-limits")
    assert (SHOTS / "queue-group-limits.png").stat().st_size > 10_000
    page.locator("#groups tr", has_text="tenant-a").get_by_role("button", name="Set", exact=True).click()
    page.wait_for_selector(".flash.bad:text('Group tenant-a: weight must be a whole number')")
    page.get_by_role("button", name="Clear the weight override of tenant-42").click()
    page.wait_for_selector(".flash.ok:text('set by an operator: rate.')")
    assert [g.weight for g in groups("mail", client=client) if g.name == "tenant-42"] == [1]
