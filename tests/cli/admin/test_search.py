"""`sidequest search` (cli/admin/search.py): a page of matches from every place, the command for
the next page, --json, the bulk actions, and one-line refusals."""

import json

from helpers import cli_ok as ok
from jobs_for_tests import echo

from sidequest.api import DeadSet
from sidequest.jobs.payload import encode, new_jid


def test_search_lists_pages_and_acts_on_every_match(cli, client, r):
    queued = client.push(echo, ["customer-42"])
    dead = [new_jid() for _ in range(3)]
    for n, jid in enumerate(dead):
        r.zadd("dead", {encode({"class": "Echo", "args": ["customer-42", n], "queue": "default", "jid": jid,
                                "error_class": "KeyError", "error_message": "gone"}): n})
    listed = ok(cli("search", "--class", "Echo", "--args", "customer-42"))
    assert all(jid in listed for jid in [queued, *dead]) and "4 matching jobs; the search is complete" in listed
    document = json.loads(ok(cli("search", "--error", "KeyError", "--json")))
    assert sorted(h["jid"] for h in document["hits"]) == sorted(dead) and document["cursor"] is None
    assert {h["where"] for h in document["hits"]} == {"dead"}
    assert ok(cli("search", "--args", "customer-42", "--in", "queue", "--json")).count('"where": "queue"') == 1
    assert "3 matching jobs retried" in ok(cli("search", "retry", "--args", "customer-42"))
    assert DeadSet(client).size == 0


def test_a_long_search_prints_the_command_for_the_next_page(cli, client):
    client.push_bulk(echo, [["customer-42", n] for n in range(2100)])
    first = ok(cli("search", "--args", "customer-42", "--limit", "10"))
    assert "next page: sidequest search --args customer-42 --cursor " in first
    cursor = first.rsplit("--cursor ", 1)[1].split()[0]
    rest = json.loads(ok(cli("search", "--args", "customer-42", "--cursor", cursor, "--json")))
    assert len(rest["hits"]) == 100 and rest["cursor"] is None


def test_search_refuses_in_one_line(cli):
    for args, says in ((["search"], "say what to find"), (["search", "nuke", "--class", "X"], "unknown search action"),
                       (["search", "--class", "X", "--cursor", "bad"], "not a search cursor"),
                       (["search", "retry", "--class", "X", "--cursor", "c"], "--cursor is for reading pages")):
        result = cli(*args)
        assert result.exit_code != 0 and says in result.output and "Traceback" not in result.output
