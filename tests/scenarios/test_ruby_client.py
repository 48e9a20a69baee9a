"""The client's payloads against real Ruby Sidekiq 6.4: field by field, and run by Ruby itself."""

import json

import pytest
from conftest import wait_until
from jobs_for_tests import echo, kw_echo
from ruby_peer import RubySidekiq, ruby_push


def only(r, key):
    items = r.lrange(key, 0, -1)
    assert len(items) == 1
    return json.loads(items[0])


def test_immediate_payload_matches_ruby_clients_field_by_field(ruby, client, r, redis_url):
    ruby_push(redis_url, "echo")
    theirs = only(r, "queue:default")
    r.delete("queue:default")
    client.push("RubyEcho", [1, "two", {"three": [3.5, None, True]}])
    ours = only(r, "queue:default")
    assert list(ours) == list(theirs)  # same fields, in the same order
    for field in ("class", "args", "queue", "retry"):
        assert ours[field] == theirs[field], field
    for field in ("created_at", "enqueued_at"):
        assert type(ours[field]) is type(theirs[field]) is float
    assert len(ours["jid"]) == len(theirs["jid"]) == 24
    assert r.smembers("queues") == {b"default"}


def test_scheduled_payload_matches_ruby_clients(ruby, client, r, redis_url):
    ruby_push(redis_url, "echo-in")
    [(theirs_raw, their_score)] = r.zrange("schedule", 0, -1, withscores=True)
    r.delete("schedule")
    client.push("RubyEcho", ["later"], in_=3600)
    [(ours_raw, our_score)] = r.zrange("schedule", 0, -1, withscores=True)
    theirs, ours = json.loads(theirs_raw), json.loads(ours_raw)
    assert sorted(ours) == sorted(theirs) and "enqueued_at" not in ours
    assert our_score == pytest.approx(their_score, abs=5)


def test_ruby_sidekiq_runs_jobs_pushed_by_sidequest(ruby, client, r, redis_url):
    args = [[1, "two", {"nested": [None, 2.5, True]}], ["ünïcode ✓"]]
    jids = client.push_bulk(echo, args)
    peer = RubySidekiq(redis_url)
    try:
        wait_until(lambda: r.llen("test:ruby-ran") == 2, 60, 0.1, "Ruby Sidekiq to run both jobs")
    finally:
        log = peer.stop()
    ran = {d["jid"]: d for d in map(json.loads, r.lrange("test:ruby-ran", 0, -1))}
    assert set(ran) == set(jids), log
    assert [ran[j]["args"] for j in jids] == args
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0


def test_a_ruby_worker_gives_a_python_jobs_keyword_arguments_no_place_in_perform(ruby, client, r, redis_url):
    """A job pushed with kwargs, run by Ruby Sidekiq for a Ruby class of the same name: perform
    gets the positional args alone (Ruby keeps the unknown `kwargs` key, and never passes it)."""
    jid = kw_echo.set(client=client).perform_async(1, {"a": 2}, template="reset", ids=[3])
    assert only(r, "queue:default")["kwargs"] == {"template": "reset", "ids": [3]}
    peer = RubySidekiq(redis_url)
    try:
        wait_until(lambda: r.llen("test:ruby-ran") == 1, 60, 0.1, "Ruby Sidekiq to run the job")
    finally:
        log = peer.stop()
    ran = json.loads(r.lindex("test:ruby-ran", 0))
    assert ran == {"jid": jid, "args": [1, {"a": 2}], "kwargs": {}}, log
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
