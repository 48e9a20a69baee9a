"""Unique jobs: one claim per class, args and queue, taken with the push and ended through the lifecycle."""

import json
import threading
import time

import pytest
from conftest import wait_until
from helpers import pttl_and_spent, queue_items, ran, zset_items
from jobs_for_tests import UniqueRetry, echo, unique_at_start, unique_boom, unique_work

import sidequest
from sidequest import JobArgumentError, JobDefinitionError, Task
from sidequest.api import Queue, RetrySet
from sidequest.features.unique import UniqueFeature, digest
from sidequest.jobs.registry import Registry
from sidequest.store.scripts import core_lib
from sidequest.worker.lifecycle import Lifecycle


def claim_of(r, name, args, queue="default"):
    return f"sidequest:unique:{digest(name, args, queue)}"


def test_twenty_threads_pushing_one_unique_job_write_it_once(client, r):
    barrier = threading.Barrier(20)
    jids = []
    began = time.monotonic()

    def push():
        barrier.wait()
        jids.append(client.push(unique_work, [1]))

    threads = [threading.Thread(target=push) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = [j for j in jids if j is not None]
    assert len(jids) == 20 and len(written) == 1 and jids.count(None) == 19
    [payload] = queue_items(r)
    assert payload["jid"] == written[0] and payload["unique_for"] == 60
    assert payload["unique_digest"] == digest("UniqueWork", [1], "default")
    key = claim_of(r, "UniqueWork", [1])
    assert r.get(key).decode() == written[0]
    pttl, spent = pttl_and_spent(r, key, began)
    assert 60_000 - spent <= pttl <= 60_000


def test_the_claim_is_per_class_args_and_queue(client, r):
    assert client.push(unique_work, [1]) is not None
    assert client.push(unique_work, [2]) is not None  # other args
    assert client.push(unique_work, [1], queue="other") is not None  # other queue
    assert client.push(unique_work, [1]) is None
    assert unique_work.set(client=client).perform_async(2) is None
    assert len(queue_items(r)) == 2 and len(queue_items(r, "other")) == 1


def test_the_claim_is_per_keyword_arguments_too(client, r):
    """Keyword arguments are part of what a job does: the digest includes them when there are some
    (without any it is the digest of [class, args, queue], as before)."""
    assert client.push(unique_work, [1]) is not None
    assert client.push(unique_work, [1], {"gate": "a"}) is not None
    assert client.push(unique_work, [1], {"gate": "b"}) is not None
    assert unique_work.set(client=client).perform_async(1, gate="a") is None
    assert client.push(unique_work, [1]) is None
    digests = [p["unique_digest"] for p in queue_items(r)]
    assert digests[-1] == digest("UniqueWork", [1], "default") and len(set(digests)) == 3
    assert digest("J", [1], "q", {"b": 1, "a": [2]}) == digest("J", [1], "q", {"a": [2], "b": 1})


def test_bulk_pushes_take_one_claim_each_in_one_call(client, r):
    jids = client.push_bulk(unique_work, [[1], [1], [2], [3]])
    assert jids[0] and jids[1] is None and jids[2] and jids[3]
    assert [p["args"] for p in reversed(queue_items(r))] == [[1], [2], [3]]  # order kept
    again = client.push_bulk(unique_work, [[2], [4]])
    assert again[0] is None and again[1] == r.get(claim_of(r, "UniqueWork", [4])).decode()


def test_a_scheduled_unique_job_holds_its_claim_until_unique_for_after_its_time(client, r):
    began = time.monotonic()
    jid = client.push(unique_work, [1], in_=100)
    assert client.push(unique_work, [1]) is None  # scheduled counts as pending
    assert client.push(unique_work, [1], in_=5) is None
    [(payload, _)] = zset_items(r, "schedule")
    assert payload["jid"] == jid and r.get(claim_of(r, "UniqueWork", [1])).decode() == jid
    pttl, spent = pttl_and_spent(r, claim_of(r, "UniqueWork", [1]), began)
    assert 160_000 - spent - 1 <= pttl <= 160_000  # - 1: the claim's milliseconds are rounded down


def test_the_claim_expires_after_unique_for(client, r):
    began = time.monotonic()
    first = client.push(unique_work, [1], unique_for=2)
    assert client.push(unique_work, [1], unique_for=2) is None or time.monotonic() - began >= 2
    wait_until(lambda: not r.exists(claim_of(r, "UniqueWork", [1])), 30, 0.05, "the claim to expire")
    second = client.push(unique_work, [1], unique_for=2)
    assert second and second != first
    assert len(queue_items(r)) == 2


def test_unique_for_none_pushes_without_a_claim(client, r):
    assert client.push(unique_work, [1]) is not None
    assert client.push(unique_work, [1], unique_for=None) is not None
    assert unique_work.set(client=client, unique_for=None).perform_async(1) is not None
    assert len(queue_items(r)) == 3
    assert "unique_digest" not in queue_items(r)[0]


def test_plain_pushes_write_no_claim(client, r):
    client.push(echo, [1])
    client.push_bulk(echo, [[1], [2]])
    assert r.keys("sidequest:unique:*") == []
    assert all("unique_digest" not in p for p in queue_items(r))


def test_bad_unique_options_are_refused_before_anything_is_written(client, r):
    for options in ({"unique_for": 0}, {"unique_for": -5}, {"unique_for": "1h"}, {"unique_for": True},
                    {"unique_for": float("inf")}, {"unique_until": "end"}, {"unique_digest": "x"}):
        with pytest.raises(JobArgumentError):
            client.push(echo, [1], **options)
    with pytest.raises(JobDefinitionError, match="unique_until"):
        sidequest.job(name="BadUnique", unique_until="finish", registry=Registry())(lambda: None)
    assert r.keys("*") == []


def test_a_task_refuses_unique_jobs(client, r):
    task = Task.create("t", client=client)
    with pytest.raises(JobArgumentError, match="task"):
        task.add(unique_work, 1)
    assert queue_items(r) == [] and r.keys("sidequest:unique:*") == []
    assert task.add(unique_work.set(unique_for=None), 1)


def test_the_claim_ends_when_the_job_succeeds(client, r, start):
    key = claim_of(r, "UniqueWork", [1])
    jid = client.push(unique_work, [1])
    start()
    wait_until(lambda: ran(r, "unique-done"), message="the job to run")
    wait_until(lambda: not r.exists(key), message="the claim to end")
    assert client.push(unique_work, [1]) not in (None, jid)


def test_the_claim_is_held_while_the_job_runs(client, r, start):
    key = claim_of(r, "UniqueWork", [1, "gate"])
    jid = client.push(unique_work, [1, "gate"])
    start()
    wait_until(lambda: ran(r, "unique-start"), message="the job to start")
    assert client.push(unique_work, [1, "gate"]) is None
    assert r.get(key).decode() == jid
    r.set("gate", 1)
    wait_until(lambda: not r.exists(key), message="the claim to end")


def test_the_claim_ends_when_the_job_dies(client, r, start):
    key = claim_of(r, "UniqueBoom", [1])
    jid = client.push(unique_boom, [1])
    start()
    wait_until(lambda: r.zcard("dead") == 1, message="the job to die")
    assert zset_items(r, "dead")[0][0]["jid"] == jid
    assert not r.exists(key)
    assert client.push(unique_boom, [1]) is not None


def test_the_claim_is_kept_while_the_job_waits_for_a_retry(client, r, start):
    key = claim_of(r, "UniqueRetry", [1])
    jid = client.push(UniqueRetry, [1])
    start()
    wait_until(lambda: r.zcard("retry") == 1, message="the retry")
    assert r.get(key).decode() == jid
    assert client.push(UniqueRetry, [1]) is None
    # an operator killing the retrying job ends the claim (the admin API's lifecycle)
    assert RetrySet(client=client).find_job(jid).kill()
    assert not r.exists(key)
    assert client.push(UniqueRetry, [1]) is not None


def test_unique_until_start_ends_the_claim_when_the_job_starts(client, r, start):
    key = claim_of(r, "UniqueAtStart", [1, "gate"])
    jid = client.push(unique_at_start, [1, "gate"])
    assert client.push(unique_at_start, [1, "gate"]) is None
    start(concurrency=1)
    wait_until(lambda: ran(r, "unique-start"), message="the job to start")
    wait_until(lambda: not r.exists(key), message="the claim to end at start")
    second = client.push(unique_at_start, [1, "gate"])  # while the first still runs
    assert second not in (None, jid)
    assert r.get(key).decode() == second
    r.set("gate", 1)
    wait_until(lambda: len(ran(r, "unique-start")) == 2, message="the second copy to run")


def test_an_operator_deleting_a_queued_unique_job_ends_its_claim(client, r):
    key = claim_of(r, "UniqueWork", [1])
    jid = client.push(unique_work, [1])
    assert Queue("default", client=client).find_job(jid).delete()
    assert not r.exists(key)


def test_cancelling_a_queued_unique_job_ends_its_claim(client, r):
    key = claim_of(r, "UniqueWork", [1])
    jid = client.push(unique_work, [1])
    assert sidequest.cancel(jid, client=client)
    assert not r.exists(key)
    assert client.push(unique_work, [1]) is not None


def test_an_expired_claim_taken_by_a_later_copy_is_not_ended_by_the_earlier_one(r):
    lifecycle = Lifecycle([UniqueFeature()])
    apply = r.register_script(core_lib(lifecycle.lua) + "run_ops(ARGV, 3, ARGV[1], ARGV[2]) return 1")
    payload = {"class": "UniqueWork", "args": [1], "queue": "default", "jid": "a" * 24,
               "unique_digest": digest("UniqueWork", [1], "default")}
    key = f"sidequest:unique:{payload['unique_digest']}"
    r.set(key, "b" * 24)  # the earlier copy's claim expired; a later copy holds it now
    apply(args=["finished", time.time(), *lifecycle.ops("finished", payload)])
    assert r.get(key).decode() == "b" * 24
    r.set(key, "a" * 24)
    assert lifecycle.ops("retried", payload) == [0]
    apply(args=["dead", time.time(), *lifecycle.ops("dead", payload)])
    assert not r.exists(key)


def test_the_digest_is_canonical_json_of_class_args_and_queue():
    assert digest("J", [{"b": 1, "a": 2}], "q") == digest("J", [{"a": 2, "b": 1}], "q")
    assert digest("J", [1], "q") != digest("J", [1], "r") != digest("K", [1], "r")
    import hashlib
    assert digest("J", ["é"], "q") == hashlib.sha256(json.dumps(["J", ["é"], "q"], ensure_ascii=False,
                                                                separators=(",", ":")).encode()).hexdigest()
