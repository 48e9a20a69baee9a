"""The job page in a real browser (Debian's headless Chromium, driven by Playwright) against a
`sidequest web` subprocess: a real job that a real worker ran through two durable steps and a
failed third, reached by its link on the Retries page; markup in its arguments, a step's name
and a step's result shown as text and run nowhere; the Reset and Retry buttons (with their
confirmations) act and come back to the page. Screenshot: tests/artifacts/screenshots/job-page.png.

The browser, page and `sidequest web` fixtures are the dashboard tests' (tests/scenarios/test_web_browser.py).
"""

from __future__ import annotations

import pytest
from conftest import wait_until

import sidequest
from scenarios.test_web_browser import SHOTS, XSS, _shoot, browser, page, web  # noqa: F401  (fixtures)
from sidequest.api import RetrySet, job_steps
from sidequest.client import sync_client

MARKUP = "<img src=x onerror=alert(2)>"


def _crm(order):
    raise ConnectionError(f"CRM <down> for {order}")


class Checkout(sidequest.Job, name="BrowserCheckout", retry=5):
    """Charge and receipt recorded, then the CRM step fails: the job waits an hour in retry."""

    def retry_in(self, count, exc):
        return 3600

    def perform(self, order, note):
        sidequest.step("charge", lambda: {"charge": f"ch-{order}", "note": XSS, "amount_cents": 4200})
        sidequest.step(MARKUP, lambda: {"receipt": "r-" + "x" * 400})
        sidequest.step("crm", _crm, order)


@pytest.fixture
def in_retry(start, client, monkeypatch):
    monkeypatch.setattr(sync_client, "_default", client)  # the steps reach the test Redis
    start()
    jid = client.push(Checkout, [1042, XSS])
    wait_until(lambda: RetrySet(client).find_job(jid), 30, message="the checkout to fail into retry")
    return jid


def test_the_job_page_shows_the_steps_as_text_and_its_buttons_act(page, web, in_retry, client):  # noqa: F811
    jid = in_retry
    page.goto(f"{web.url}/retries")
    page.get_by_role("link", name=jid).click()
    page.wait_for_url(f"{web.url}/jobs/{jid}?in=retries&key=*")
    assert page.locator("h1").text_content() == "BrowserCheckout"
    assert page.locator("[data-job-state]").text_content() == "retry"
    rows = page.locator("[data-steps] tbody tr")
    assert [rows.nth(i).get_attribute("data-step") for i in range(rows.count())] == ["charge", MARKUP, "crm"]
    states = [rows.nth(i).locator("td[data-label=State]").inner_text() for i in range(3)]
    assert states == ["done", "done", "failed"]
    assert XSS in rows.nth(0).inner_text() and MARKUP in rows.nth(1).inner_text()
    assert "CRM <down> for 1042" in rows.nth(2).inner_text()
    assert rows.nth(1).inner_text().count("x") < 250  # a long result is cut
    assert XSS in page.inner_text("[data-args]")
    assert page.locator("main script, main img[src=x], main b").count() == 0  # text, never markup
    assert page.dialogs == [] and page.errors == []
    _shoot(page, "job-page")
    assert (SHOTS / "job-page.png").stat().st_size > 10_000

    rows.nth(0).get_by_role("button", name="Reset").click()
    page.wait_for_selector(".flash.ok")
    assert ("confirm", "Forget this step? The job's next run runs its body again.") in page.dialogs
    assert "Forgot step “charge”" in page.inner_text(".flash")
    assert [s.name for s in job_steps(jid, client).steps] == [MARKUP, "crm"]
    assert page.locator("[data-steps] tbody tr").count() == 2

    page.get_by_role("button", name="Retry now").click()
    page.wait_for_selector(".flash.ok")
    assert page.url == f"{web.url}/jobs/{jid}" and "Retried 1 job." in page.inner_text(".flash")
    assert page.errors == []
