"""The dashboard's Search page (web/pages/search.py): matches of every place linked to their job
page, a cursor link to the next page, bulk actions that need the CSRF token, none when read-only."""

import pytest
from jobs_for_tests import echo
from starlette.testclient import TestClient

from sidequest.api import RetrySet, Search
from sidequest.jobs.payload import encode, new_jid
from sidequest.web import create_app
from sidequest.web.security import COOKIE

HTML = {"accept": "text/html"}


@pytest.fixture
def http(client):
    return TestClient(create_app(client))


def test_the_page_lists_matches_pages_by_cursor_and_retries_with_the_token(http, client, r):
    queued = client.push(echo, ["customer-42"])
    retrying = [new_jid() for _ in range(3)]
    for n, jid in enumerate(retrying):
        r.zadd("retry", {encode({"class": "Echo", "args": ["customer-42", n], "queue": "default", "jid": jid,
                                 "error_class": "Timeout", "error_message": "slow", "retry_count": 2}): 2.0e9})
    text = http.get("/search?name=Echo&args=customer-42", headers=HTML).text
    assert all(f'/jobs/{jid}"' in text for jid in [queued, *retrying]) and "the search is complete" in text
    assert http.get("/search?name=Echo&cursor=nonsense", headers=HTML).text.count("not a search cursor") == 1
    only = http.get("/search?error=Timeout&in=queue", headers=HTML).text
    assert "Nothing matches on this page" in only

    form = {"do": "retry_all", "name": "Echo", "args": "customer-42"}
    assert http.post("/search/actions", data=form).status_code == 403  # no token: refused
    assert RetrySet(client).size == 3
    http.get("/", headers=HTML)
    done = http.post("/search/actions", data={**form, "csrf": http.cookies[COOKIE]}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/search?name=Echo&args=customer-42"
    assert RetrySet(client).size == 0 and len(list(Search(args="customer-42", client=client))) == 4
    assert "Retried or queued to run 3 matching jobs." in http.get(done.headers["location"], headers=HTML).text


def test_read_only_shows_matches_and_no_actions(client):
    client.push(echo, ["customer-42"])
    looking = TestClient(create_app(client, read_only=True))
    text = looking.get("/search?args=customer-42", headers=HTML).text
    assert "1 match on this page" in text and "Retry all matching" not in text


def test_ticked_matches_are_acted_on_one_by_one(http, client, r):
    queued = client.push(echo, ["customer-42"])
    jid = new_jid()
    r.zadd("retry", {encode({"class": "Echo", "args": ["customer-42"], "queue": "default", "jid": jid,
                             "retry_count": 1}): 2.0e9})
    entry = RetrySet(client).find_job(jid)
    http.get("/", headers=HTML)
    token = http.cookies[COOKIE]
    text = http.get("/search?args=customer-42", headers=HTML).text
    assert f'value="retry|{entry.key}"' in text and f'value="queue|{queued}|default"' in text
    killed = http.post("/search/actions", data={"do": "kill", "args": "customer-42", "csrf": token,
                                                "key": [f"retry|{entry.key}", f"queue|{queued}|default"]})
    assert "Killed 1 job. 1 had moved meanwhile, or cannot be acted on there." in killed.text
    assert RetrySet(client).size == 0 and [h.where for h in Search(jid=jid, client=client)] == ["dead"]
    deleted = http.post("/search/actions", data={"do": "delete", "args": "customer-42", "csrf": token,
                                                 "key": f"queue|{queued}|default"})
    assert "Deleted 1 job." in deleted.text and list(Search(jid=queued, client=client)) == []


def test_a_capped_set_filter_links_to_every_match_on_the_search_page(http, client, r):
    r.zadd("dead", {encode({"class": "Echo", "args": [n], "queue": "default", "jid": new_jid()}): n for n in range(3)})
    text = http.get("/dead?q=Echo&by=name", headers=HTML).text
    assert 'href="/search?name=Echo&amp;in=dead" data-search-link' in text
    assert "3 matches on this page" in http.get("/search?name=Echo&in=dead", headers=HTML).text
