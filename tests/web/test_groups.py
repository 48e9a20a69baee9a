"""The queue page's lanes: its groups (the 50 largest, limits, paused, pause and resume with the
CSRF token; reset for a group holding slots) and its jobs waiting per priority level; nothing of
it on a queue without lanes; group names escaped."""

from __future__ import annotations

import re

import pytest
from lane_state import fill, laned, scene
from starlette.testclient import TestClient

from sidequest.api import groups, pause_group
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
def mail(client) -> None:
    scene(client, "mail")
    pause_group("mail", "tenant-c", client=client)


def test_the_queue_page_shows_groups_and_waiting_by_priority(client, mail):
    page = TestClient(create_app(client)).get("/queues/mail", headers=HTML).text
    assert rows(page, "groups") == [
        "tenant-b 10 0 10 per 60 s Pause",
        "tenant-a 5 1 \N{EN DASH} Pause Reset",
        "tenant-c paused 3 0 2 at once Resume",
    ]
    cards = re.findall(r'<div class="label">Priority (\d)</div><div class="value">([\d,]+)</div>', page)
    assert cards == [("9", "10"), ("5", "8"), ("0", "7")]


def test_a_queue_without_lanes_shows_neither(client, mail):
    client.push("Echo", [1], queue="plain")
    page = TestClient(create_app(client)).get("/queues/plain", headers=HTML).text
    assert "Groups" not in page and "Waiting by priority" not in page and 'id="groups"' not in page


def test_the_50_largest_groups_are_shown(client):
    fill(client, "big")
    for n in range(1, 61):
        laned(client, "big", n, group=f"g{n:02d}")
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
    assert "tenant-a paused 5 1 \N{EN DASH} Resume Reset" in rows(page, "groups")
    http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-c", "do": "resume"})
    assert {g.name for g in groups("mail", client=client) if g.paused} == {"tenant-a"}
    wrong = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-a", "do": "x"})
    assert wrong.status_code == 400


def test_reset_a_group_with_the_token(client, mail):
    http = TestClient(create_app(client))
    token = token_of(http, "/queues/mail")
    done = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-a", "do": "reset"},
                     headers=HTML)
    assert "Reset group tenant-a: gave back 1 slot; its jobs still running go on." in done.text
    assert [g.running for g in groups("mail", client=client) if g.name == "tenant-a"] == [0]
    assert "tenant-a 5 0 \N{EN DASH} Pause" in rows(done.text, "groups")  # no slot held: no Reset button


def test_a_group_name_is_shown_and_acted_on_as_text(client):
    fill(client, "mail")
    laned(client, "mail", 2, group=XSS)
    laned(client, "mail", 1, group="<b>bold</b>", priority=9)
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
    assert rows(page, "groups")[0] == "tenant-b 10 0 10 per 60 s"
    assert "group-actions" not in page
