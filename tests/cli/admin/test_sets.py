"""`sidequest retries|scheduled|dead` lists (cli/admin/sets.py): jobs shown as the dashboard shows
them (an ActiveJob by its own class, found by it with --class, `display_class` in --json) and in
the dashboard's order (retries and scheduled jobs the soonest first, dead jobs the newest first)."""

import json

from conftest import wait_until
from helpers import cli_ok as ok
from jobs_for_tests import echo

import sidequest
from sidequest.api import DeadSet, RetrySet
from sidequest.jobs.payload import encode, new_jid
from sidequest.jobs.registry import Registry

WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
RAILS_NAMES = Registry()  # the Python side of a Rails app's ActiveJob, for this module's worker only


@sidequest.job(name="SendReceiptJob", registry=RAILS_NAMES)
def send_receipt(order_id: int, currency: str, note: str = "") -> None:
    raise ValueError(f"card declined for order {order_id}")


def rows(text: str, jids: list[str]) -> list[str]:
    """The table rows of `text` naming one of `jids`, in the order printed."""
    return [line for line in text.splitlines() if any(jid in line for jid in jids)]


def test_a_rails_retry_is_listed_and_found_as_its_activejob_class(cli, client, start):
    jid = sidequest.push_active_job("SendReceiptJob", [42, "eur"], {"note": "x"}, client=client)
    worker = start(registry=RAILS_NAMES)  # a real failure: the retry as a worker writes it
    wait_until(lambda: RetrySet(client).size == 1, 30, 0.05, "the failure to reach the retry set")
    worker.stop()
    [row] = rows(listed := ok(cli("retries", "list")), [jid])
    assert "SendReceiptJob" in row and '[42, "eur"' in row and "JobWrapper" not in listed
    for name in ("SendReceiptJob", WRAPPER):  # the class it runs as, or the wire's
        found = json.loads(ok(cli("retries", "list", "--class", name, "--json")))["jobs"]
        assert [(j["jid"], j["class_name"], j["display_class"]) for j in found] == [(jid, WRAPPER, "SendReceiptJob")]
    assert f"SendReceiptJob ({WRAPPER})" in ok(cli("retries", "show", jid))

    ok(cli("retries", "kill", "--class", "SendReceiptJob"))
    assert DeadSet(client).size == 1
    [row] = rows(listed := ok(cli("dead", "list", "--class", "SendReceiptJob")), [jid])
    assert "SendReceiptJob" in row and "JobWrapper" not in listed
    waiting = sidequest.push_active_job("SendReceiptJob", [7, "usd"], client=client)
    [row] = rows(listed := ok(cli("queues", "show", "default")), [waiting])
    assert "SendReceiptJob" in row and '[7, "usd"]' in row and "JobWrapper" not in listed


def printed(text: str, jids: list[str]) -> list[str]:
    """Which of `jids` the table rows of `text` name, in the order printed."""
    return [next(jid for jid in jids if jid in line) for line in rows(text, jids)]


def stored(r, key: str, scores: list[float]) -> list[str]:
    """Failed Echo jobs as Sidekiq stores them in `key`, one per score; their jids."""
    jids = []
    for score in scores:
        jids.append(new_jid())
        r.zadd(key, {encode({"class": "Echo", "args": [score], "queue": "default", "jid": jids[-1], "retry": True,
                             "retry_count": 0, "error_class": "ValueError", "error_message": "x",
                             "failed_at": score - 100}): score})
    return jids


def test_retries_list_the_soonest_next_retry_first(cli, client, r):
    now = client.clock()
    late, soon, middle = stored(r, "retry", [now + 3000, now + 100, now + 2000])
    assert printed(ok(cli("retries")), [late, soon, middle]) == [soon, middle, late]
    assert [j["jid"] for j in json.loads(ok(cli("retries", "list", "--json")))["jobs"]] == [soon, middle, late]
    first_two = ok(cli("retries", "list", "--class", "Echo", "--limit", "2"))
    assert printed(first_two, [late, soon, middle]) == [soon, middle]
    assert "2 soonest of 3 matching jobs shown; --limit N for more (3 in the retry set)" in first_two
    assert "2 soonest of 3 shown" in ok(cli("retries", "list", "--limit", "2"))


def test_scheduled_jobs_list_the_soonest_first_and_dead_jobs_the_newest_first(cli, client, r):
    later, sooner = client.push(echo, ["later"], in_=3600), client.push(echo, ["sooner"], in_=60)
    assert [j["jid"] for j in json.loads(ok(cli("scheduled", "--json")))["jobs"]] == [sooner, later]
    now = client.clock()
    old, new = stored(r, "dead", [now - 3000, now - 10])
    assert [j["jid"] for j in json.loads(ok(cli("dead", "--json")))["jobs"]] == [new, old]
    assert [j["jid"] for j in json.loads(ok(cli("dead", "--class", "Echo", "--json")))["jobs"]] == [new, old]
