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
