"""The queue page's lanes: its groups (the 50 largest, limits, paused, pause and resume with the
CSRF token) and its jobs waiting per priority level; nothing of it on a queue without lanes;
group names escaped."""

from __future__ import annotations

import re

import pytest
from lane_state import LaneState
from starlette.testclient import TestClient

from sidequest.api import groups
from sidequest.web import create_app
from sidequest.web.security import COOKIE

HTML = {"Accept": "text/html"}
XSS = "<script>alert(1)</script>"


def token_of(http: TestClient, path: str = "/") -> str:
    http.get(path, headers=HTML)
    return str(http.cookies[COOKIE])


def rows(page: str, section: str) -> list[str]:
    """The text of each row of one section's table body, tags dropped, spaces collapsed."""
    part = page.split(f'id="{section}"', 1)[1].split("</section>", 1)[0]
    body = part.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in body.split("</tr>")[:-1]]


@pytest.fixture
def mail(client) -> LaneState:
    state = LaneState(client, "mail")
    state.waiting("tenant-a", 120)
    state.running("tenant-a", 2)
    state.limits("tenant-a", concurrency=2, count=10, period_ms=60_000)
    state.waiting("tenant-b", 3, level=9)
    state.waiting("", 4, level=0)
    state.running("tenant-c", 1)
    client.redis.sadd(f"{state.base}:paused", "tenant-c")
    return state


def test_the_queue_page_shows_groups_and_waiting_by_priority(client, mail):
    page = TestClient(create_app(client)).get("/queues/mail", headers=HTML).text
    assert rows(page, "groups") == [
        "tenant-a 120 2 2 at once · 10 per 60 s Pause",
        "tenant-b 3 0 \N{EN DASH} Pause",
        "tenant-c paused 0 1 \N{EN DASH} Resume",
    ]
    cards = re.findall(r'<div class="label">Priority (\d)</div><div class="value">([\d,]+)</div>', page)
    assert cards == [("9", "3"), ("5", "120"), ("0", "4")]


def test_a_queue_without_lanes_shows_neither(client, mail):
    client.push("Echo", [1], queue="plain")
    page = TestClient(create_app(client)).get("/queues/plain", headers=HTML).text
    assert "Groups" not in page and "Waiting by priority" not in page and 'id="groups"' not in page


def test_the_50_largest_groups_are_shown(client):
    state = LaneState(client, "big")
    for n in range(1, 61):
        state.waiting(f"g{n:02d}", n)
    page = TestClient(create_app(client)).get("/queues/big", headers=HTML).text
    shown = [row.split()[0] for row in rows(page, "groups")]
    assert shown == [f"g{n:02d}" for n in range(60, 10, -1)]
    assert "the 50 largest" in page


def test_pause_and_resume_a_group_with_the_token(client, mail):
    http = TestClient(create_app(client))
    token = token_of(http, "/queues/mail")
    refused = http.post("/queues/group-actions", data={"name": "mail", "group": "tenant-a", "do": "pause"})
    assert refused.status_code == 403
    done = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-a", "do": "pause"},
                     follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/queues/mail"
    assert {g.name for g in groups("mail", client=client) if g.paused} == {"tenant-a", "tenant-c"}
    page = http.get("/queues/mail", headers=HTML).text
    assert rows(page, "groups")[0].startswith("tenant-a paused")
    http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-c", "do": "resume"})
    assert {g.name for g in groups("mail", client=client) if g.paused} == {"tenant-a"}
    wrong = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-a", "do": "x"})
    assert wrong.status_code == 400


def test_a_group_name_is_shown_and_acted_on_as_text(client):
    state = LaneState(client, "mail")
    state.waiting(XSS, 2)
    state.waiting("<b>bold</b>", 1, level=9)
    http = TestClient(create_app(client))
    page = http.get("/queues/mail", headers=HTML).text
    assert "<script>alert" not in page and "<b>bold" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 2  # the cell and the form's hidden field
    token = token_of(http, "/queues/mail")
    flashed = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": XSS, "do": "pause"},
                        headers=HTML).text  # the page it goes back to, with its message
    assert [g.name for g in groups("mail", client=client) if g.paused] == [XSS]
    assert "<script>alert" not in flashed and "Paused group &lt;script&gt;" in flashed


def test_read_only_shows_the_groups_without_buttons(client, mail):
    http = TestClient(create_app(client, read_only=True))
    page = http.get("/queues/mail", headers=HTML).text
    assert rows(page, "groups")[0] == "tenant-a 120 2 2 at once · 10 per 60 s"
    assert "group-actions" not in page
