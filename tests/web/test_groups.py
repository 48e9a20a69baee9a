"""The queue page's lanes: its groups (the 50 largest, limits and where each comes from, paused,
pause and resume with the CSRF token; reset for a group holding slots; an operator's overrides set
and cleared from the page, under a real server, changing what a worker's poller stages) and its
jobs waiting per priority level; nothing of it on a queue without lanes; group names escaped."""

from __future__ import annotations

import html
import json
import re
from collections import Counter

import httpx
import pytest
from lane_state import fill, laned, scene
from starlette.testclient import TestClient

from sidequest import Client
from sidequest.api import groups, pause_group, resume_group
from sidequest.config import Config
from sidequest.store import keys
from sidequest.store.lanes import LANE_DEPTH
from sidequest.web import create_app
from sidequest.web.security import COOKIE
from sidequest.worker.background.poller import Poller
from web.test_app_server import Served

HTML = {"Accept": "text/html"}
XSS = "<script>alert(1)</script>"


def token_of(http: TestClient, path: str = "/") -> str:
    http.get(path, headers=HTML)
    return str(http.cookies[COOKIE])


def rows(page: str, section: str) -> list[str]:
    """The text of each row of one section's table body, tags (and a closed edit form) dropped,
    spaces collapsed."""
    part = page.split(f'id="{section}"', 1)[1].split("</section>", 1)[0]
    body = part.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    body = re.sub(r"<details.*?</details>", " ", body, flags=re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in body.split("</tr>")[:-1]]


@pytest.fixture
def mail(client) -> None:
    scene(client, "mail")
    pause_group("mail", "tenant-c", client=client)


def test_the_queue_page_shows_groups_and_waiting_by_priority(client, mail):
    page = TestClient(create_app(client)).get("/queues/mail", headers=HTML).text
    assert rows(page, "groups") == [
        "tenant-b 10 0 1 \N{EN DASH} 10 per 60 s jobs Pause",  # weight, concurrency, rate: each with its source
        "tenant-a 5 1 1 \N{EN DASH} \N{EN DASH} Pause Reset",
        "tenant-c paused 3 0 1 2 at once jobs \N{EN DASH} Resume",
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
    assert "tenant-a paused 5 1 1 \N{EN DASH} \N{EN DASH} Resume Reset" in rows(page, "groups")
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
    assert "tenant-a 5 0 1 \N{EN DASH} \N{EN DASH} Pause" in rows(done.text, "groups")  # no slot held: no Reset


def test_a_group_name_is_shown_and_acted_on_as_text(client):
    fill(client, "mail")
    laned(client, "mail", 2, group=XSS)
    laned(client, "mail", 1, group="<b>bold</b>", priority=9)
    http = TestClient(create_app(client))
    page = http.get("/queues/mail", headers=HTML).text
    assert "<script>alert" not in page and "<b>bold" not in page
    # the cell, the hidden fields of its two forms (pause, limits) and the limits' three labels
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 6
    token = token_of(http, "/queues/mail")
    flashed = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": XSS, "do": "pause"},
                        headers=HTML).text  # the page it goes back to, with its message
    assert [g.name for g in groups("mail", client=client) if g.paused] == [XSS]
    assert "<script>alert" not in flashed and "Paused group &lt;script&gt;" in flashed


def test_read_only_shows_the_groups_without_buttons(client, mail):
    http = TestClient(create_app(client, read_only=True))
    page = http.get("/queues/mail", headers=HTML).text
    assert rows(page, "groups")[0] == "tenant-b 10 0 1 \N{EN DASH} 10 per 60 s jobs"
    assert "group-actions" not in page and "<details" not in page


def staged_by_group(client: Client, config: Config, batches: int) -> Counter[str]:
    """What a worker's poller stages into `queue:default`, `batches` times a full batch (the queue
    emptied before each, as workers taking the jobs would): jobs per group."""
    poller, shares = Poller(config, client.redis), Counter[str]()
    for _ in range(batches):
        client.redis.delete(keys.queue("default"))
        poller.stage_lanes()
        shares.update(json.loads(raw)["group"] for raw in client.redis.lrange(keys.queue("default"), 0, -1))
    return shares


def test_a_weight_set_on_the_page_of_a_real_server_changes_what_a_worker_stages(client, config: Config):
    fill(client, "default")
    for group in ("a", "b", "c"):
        laned(client, "default", 400, group=group)
    served = Served(create_app(client))
    try:
        with httpx.Client(base_url=served.url, headers=HTML, follow_redirects=True) as http:
            page = http.get("/queues/default").text
            token = http.cookies[COOKIE]
            assert 'name="weight"' in page and "c 400 0 1 \N{EN DASH} \N{EN DASH} Pause" in rows(page, "groups")
            done = http.post("/queues/group-actions", data={"csrf": token, "name": "default", "group": "c",
                                                            "do": "set", "weight": "4", "concurrency": "", "rate": ""})
            assert done.status_code == 200 and "Group c: weight 4, concurrency none, rate none; set by an operator: " \
                "weight." in done.text
            assert "c 400 0 4 override Clear \N{EN DASH} \N{EN DASH} Pause" in rows(done.text, "groups")
            shares = staged_by_group(client, config, 6)  # 192 jobs: c takes 4 turns to a's and b's one
            assert sum(shares.values()) == 6 * LANE_DEPTH
            assert abs(shares["c"] / 192 - 4 / 6) <= 0.1 * 4 / 6 and abs(shares["a"] - shares["b"]) <= 4, shares
            cleared = http.post("/queues/group-actions", data={"csrf": token, "name": "default", "group": "c",
                                                               "do": "clear", "limit": "weight"})
            assert "set by an operator: nothing." in cleared.text
            assert [g.weight for g in groups("default", client=client) if g.name == "c"] == [1]
            after = staged_by_group(client, config, 3)
            assert max(after.values()) - min(after.values()) <= 4, after  # equal turns again
    finally:
        served.stop()


def test_a_concurrency_and_a_rate_set_on_the_page_stage_at_once_and_show_as_overrides(client, mail):
    http = TestClient(create_app(client))
    token = token_of(http, "/queues/mail")
    client.redis.delete(keys.queue("mail"))  # room in the queue: only tenant-c's concurrency (2) holds it
    resume_group("mail", "tenant-c", client=client)  # stages what may go
    assert [(g.waiting, g.running) for g in groups("mail", client=client) if g.name == "tenant-c"] == [(1, 2)]
    page = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-c", "do": "set",
                                                    "concurrency": "3", "rate": "50/30"}, headers=HTML).text
    assert "Group tenant-c: weight 1, concurrency 3, rate 50 per 30 s; set by an operator: concurrency, rate." in page
    assert [g.running for g in groups("mail", client=client) if g.name == "tenant-c"] == [3]  # staged in the call
    assert "tenant-c 0 3 1 3 at once override Clear 50 per 30 s override Clear Pause Reset" in rows(page, "groups")
    lifted = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-c", "do": "set",
                                                      "concurrency": "0"}, headers=HTML).text
    assert "tenant-c 0 3 1 none override Clear 50 per 30 s override Clear Pause Reset" in rows(lifted, "groups")
    cleared = http.post("/queues/group-actions", data={"csrf": token, "name": "mail", "group": "tenant-c",
                                                       "do": "clear"}, headers=HTML).text  # every override
    assert "tenant-c 0 3 1 2 at once jobs \N{EN DASH} Pause Reset" in rows(cleared, "groups")


@pytest.mark.parametrize(("fields", "message"), [
    ({"weight": "abc"}, "weight must be a whole number, got 'abc'"),
    ({"weight": "0"}, "weight must be an int from 1 to 1,000, got 0"),
    ({"concurrency": "-1"}, "concurrency must be an int from 0 (no cap) to"),
    ({"rate": "<b>ten</b>"}, "rate must be COUNT/SECONDS (e.g. 100/60) or 0, got '<b>ten</b>'"),
    ({"rate": "5/0"}, "rate must be (count, seconds) as a job's group_rate, or 0 (no rate), got (5, 0.0)"),
    ({}, "give weight=, concurrency= or rate="),
    ({"limit": "speed", "do": "clear"}, "no such group limit 'speed': the limits are concurrency, rate, weight"),
])
def test_a_value_the_api_refuses_comes_back_as_one_escaped_line_and_changes_nothing(client, mail, fields, message):
    http = TestClient(create_app(client))
    token = token_of(http, "/queues/mail")
    before = groups("mail", client=client)
    page = http.post("/queues/group-actions", headers=HTML,
                     data={"csrf": token, "name": "mail", "group": "tenant-b", "do": "set", **fields}).text
    flash = re.search(r'<div class="flash bad" role="status">([^<]*)</div>', page)
    assert flash is not None, page[:300]
    line = html.unescape(flash.group(1))
    assert line.startswith("Group tenant-b: ") and message in line and "\n" not in line
    assert "<b>ten" not in page and "Traceback" not in page
    assert groups("mail", client=client) == before


def test_overrides_are_refused_read_only_and_without_the_token(client, mail):
    fields = {"name": "mail", "group": "tenant-b", "do": "set", "weight": "3"}
    http = TestClient(create_app(client, read_only=True))
    token = token_of(http, "/queues/mail")
    refused = http.post("/queues/group-actions", data={"csrf": token, **fields})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert TestClient(create_app(client)).post("/queues/group-actions", data=fields).status_code == 403
    assert [g.overridden for g in groups("mail", client=client)] == [(), (), ()]
