"""`api.Search` (api/search/): one search over queues, lanes, scheduled, retry and dead; its pages,
its cursor, its matcher shared with the per-set filters, and its bulk actions."""

import pytest
from jobs_for_tests import echo

import sidequest
from sidequest.api import DeadSet, Queue, RetrySet, ScheduledSet, Search, pause_group
from sidequest.jobs.payload import encode, new_jid

WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"


def failed(r, key: str, klass: str, args: list, error: tuple[str, str], queue: str = "default") -> str:
    """A failed job as Sidekiq stores it in `key` (`retry` or `dead`); its jid."""
    jid = new_jid()
    r.zadd(key, {encode({"class": klass, "args": args, "queue": queue, "jid": jid, "retry": True, "retry_count": 1,
                         "error_class": error[0], "error_message": error[1], "failed_at": 1.0e9}): 2.0e9})
    return jid


@pytest.fixture
def spread(client, r):
    """Jobs of customer 42 (and others) in every place: a queue, a lane, schedule, retry, dead."""
    found = {"queue": client.push(echo, ["customer-42", 1]), "other": client.push(echo, ["customer-7", 1])}
    pause_group("default", "tenant-a", client)  # its jobs stay in their lane
    found["lane"] = client.push(echo, ["customer-42", 2], group="tenant-a")
    found["scheduled"] = client.push(echo, ["customer-42", 3], in_=3600)
    found["retry"] = failed(r, "retry", "Echo", ["customer-42", 4], ("TimeoutError", "upstream took 30 s"))
    found["dead"] = failed(r, "dead", "Echo", ["customer-42", 5], ("ValueError", "card declined"))
    found["rails"] = sidequest.push_active_job("SendReceiptJob", ["customer-42"], client=client)
    found["other_dead"] = failed(r, "dead", "Other", ["customer-42"], ("ValueError", "card declined"))
    return found


def test_one_search_finds_the_matches_in_every_place(client, spread):
    hits = list(Search(name="Echo", args="customer-42", client=client))
    assert sorted((h.where, h.record.jid) for h in hits) == sorted(
        (where, spread[where]) for where in ("queue", "lane", "scheduled", "retry", "dead"))
    [rails] = Search(name="SendReceiptJob", client=client)  # an ActiveJob by its own class
    assert (rails.where, rails.record.jid, rails.record.klass) == ("queue", spread["rails"], WRAPPER)
    assert [h.record.jid for h in Search(name=WRAPPER, client=client)] == [spread["rails"]]  # or by the wire's


def test_a_search_by_jid_error_queue_and_place(client, spread):
    assert [h.where for h in Search(jid=spread["retry"], client=client)] == ["retry"]
    assert [h.record.jid for h in Search(error="Timeout", client=client)] == [spread["retry"]]
    assert sorted(h.record.jid for h in Search(error="card declined", client=client)) == sorted(
        [spread["dead"], spread["other_dead"]])
    assert [h.record.jid for h in Search(error="declined", name="Other", client=client)] == [spread["other_dead"]]
    assert [h.where for h in Search(args="customer-42", where=["scheduled"], client=client)] == ["scheduled"]
    assert list(Search(args="customer-42", queue="mail", client=client)) == []
    assert list(Search(args='"customer-4"', client=client)) == []  # arguments as JSON: the quote ends the string
    assert list(Search(args="upstream", client=client)) == []  # in the error, not in the arguments
    with pytest.raises(ValueError, match="unknown place 'retries'"):
        Search(name="Echo", where=["retries"], client=client)


def test_pages_go_past_any_cap_and_resume_by_cursor(client, r):
    pipe = r.pipeline(transaction=False)
    wanted = set()
    for n in range(3000):
        jid = new_jid()
        args = ["customer-42" if n % 3 == 0 else f"client-{n}"]
        wanted |= {jid} if n % 3 == 0 else set()
        pipe.zadd("dead", {encode({"class": "Echo", "args": args, "queue": "default", "jid": jid}): n})
    pipe.execute()
    client.push_bulk(echo, [["customer-42", n] for n in range(2500)])  # a list of more than one LRANGE
    wanted |= {h.record.jid for h in Search(args="customer-42", where=["queue"], client=client)}
    assert len(wanted) == 3500

    search = Search(args="customer-42", client=client)
    first = search.page(limit=100)
    assert 100 <= len(first.hits) < 3500 and first.cursor is not None
    small = search.page(limit=1, budget=10)  # the budget stops a page however few it found
    assert small.read <= 2000 and small.cursor is not None
    seen, cursor, pages = [], None, 0
    while True:
        page = search.page(cursor, limit=500)
        seen += [h.record.jid for h in page.hits]
        pages += 1
        if page.cursor is None:
            break
        cursor = page.cursor
    assert pages >= 2 and len(seen) == len(set(seen)) == 3500 and set(seen) == wanted
    with pytest.raises(ValueError, match="not a search cursor"):
        search.page("nonsense")


def test_bulk_retry_moves_exactly_the_matches(client, r, spread):
    search = Search(args="customer-42", name="Echo", client=client)
    assert search.retry_all() == 3  # retry and dead retried, scheduled run now; the queued and laned stay
    assert RetrySet(client).size == 0 and ScheduledSet(client).size == 0
    assert [e.jid for e in DeadSet(client)] == [spread["other_dead"]]
    queued = {job.jid for job in Queue("default", client)}
    assert {spread[k] for k in ("queue", "retry", "dead", "scheduled", "other", "rails")} == queued
    assert Search(jid=spread["other"], client=client).delete_all() == 1
    assert Search(jid=spread["lane"], client=client).delete_all() == 0  # a laned job is cancelled, not deleted
    assert Search(jid=spread["other_dead"], client=client).kill_all() == 0  # dead already


def test_the_per_set_filter_is_this_search_over_one_set(client, r, spread):
    retries = RetrySet(client)
    assert [e.jid for e in retries.select(name="Echo", text="customer-42")] == [spread["retry"]]
    assert DeadSet(client).retry_all(name="Other") == 1
