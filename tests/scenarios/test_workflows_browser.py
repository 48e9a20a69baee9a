"""The workflow page in a real browser (Debian's headless Chromium, driven by Playwright): the
graph of a real workflow that a real worker finished with one failure, each node's status, and
markup in names and results shown as text. Screenshot: tests/artifacts/screenshots/workflow-graph.png.

The browser, page and `sidequest web` fixtures are the dashboard tests' (tests/scenarios/test_web_browser.py).
"""

from __future__ import annotations

from conftest import wait_until
from jobs_for_tests import wf_fail, wf_step

from scenarios.test_web_browser import SHOTS, XSS, _shoot, browser, page, web  # noqa: F401  (fixtures)
from sidequest import Workflow, workflow

MARKUP = "<img src=x onerror=alert(2)>"


def test_the_workflow_page_draws_each_step_with_its_status_escaped(page, web, start, client):  # noqa: F811
    start(concurrency=4)
    workflow_id = (workflow(f"{XSS} publish")
                   .add("fetch", wf_step.si("web", "fetch"))
                   .add("<b>resize</b>", wf_step.s("web", MARKUP), after=["fetch"])
                   .add("thumbnail", wf_fail.s("web", "thumbnail").on_failure("continue"), after=["fetch"])
                   .add("upload", wf_step.s("web", "upload"), after=["<b>resize</b>", "thumbnail"])
                   .add("notify", wf_step.si("web", "notify"), after=["upload"])).perform_async(client=client)
    status = wait_until(lambda: (s := Workflow.find(workflow_id, client).status())["done"] and s, 90,
                        message="the workflow to end")
    assert status["state"] == "failed" and status["counts"]["failed"] == 1 and status["counts"]["done"] == 4

    page.goto(f"{web.url}/workflows")
    page.get_by_role("link", name=f"{XSS} publish").click()
    page.wait_for_url(f"{web.url}/workflows/{workflow_id}")
    nodes = page.locator("svg g.wf-node")
    assert nodes.count() == 5
    shown = {nodes.nth(i).get_attribute("data-step"): nodes.nth(i).get_attribute("data-status") for i in range(5)}
    assert shown == {"fetch": "done", "<b>resize</b>": "done", "thumbnail": "failed", "upload": "done",
                     "notify": "done"}
    assert page.locator("svg path.wf-edge").count() == 5  # one arrow per dependency
    assert "<b>resize</b>" in page.locator('g.wf-node[data-step="<b>resize</b>"] text.wf-name').text_content()
    assert page.locator("svg b, img[src=x], script:text('alert(1)')").count() == 0  # shown as text, never markup
    assert page.locator("h1").text_content() == f"{XSS} publish"
    row = page.locator('tr[data-step="thumbnail"]')
    assert "step thumbnail <failed> on purpose" in row.text_content()
    assert MARKUP in page.locator('tr[data-step="<b>resize</b>"]').text_content()  # its result, as text
    assert page.dialogs == [] and page.errors == []
    _shoot(page, "workflow-graph")
    assert (SHOTS / "workflow-graph.png").stat().st_size > 10_000
    page.set_viewport_size({"width": 390, "height": 844})
    _shoot(page, "workflow-graph-phone")  # the graph scrolls sideways inside its panel


def test_the_cancel_button_cancels_a_running_workflow(page, web, client):  # noqa: F811
    workflow_id = (workflow("to cancel").add("first", wf_step.si("web", "first"))
                   .add("second", wf_step.si("web", "second"), after=["first"])).perform_async(client=client)
    page.goto(f"{web.url}/workflows/{workflow_id}")
    assert page.locator("[data-state]").text_content() == "running"
    page.get_by_role("button", name="Cancel workflow").click()
    page.wait_for_selector("[data-state]:text('cancelled')")
    assert page.dialogs and page.dialogs[0][0] == "confirm"
    states = {s["name"]: s["status"] for s in Workflow.find(workflow_id, client).steps()}
    assert states == {"first": "cancelled", "second": "skipped"}
    assert page.locator('g.wf-node[data-step="second"]').get_attribute("data-status") == "skipped"
