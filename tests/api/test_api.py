"""The admin API: Sidekiq's names in Python, exact-entry actions, times in both units, paging."""

import itertools
import json
import re
import threading
import time
from datetime import date

import pytest
from conftest import ROOT, wait_until
from helpers import cpu_cost, pause_seen, push_fillers, queue_items, ran
from jobs_for_tests import blocker, echo, work

import sidequest
from sidequest import Client, Task
from sidequest.api import (
    DeadSet,
    History,
    MetricsQuery,
    ProcessSet,
    Queue,
    RetrySet,
    ScheduledSet,
    SortedEntry,
    Stats,
    Workers,
    WorkSet,
)
from sidequest.errors import PayloadError

NOW = 1_800_000_000.0  # a fixed clock for the tests that compute with times


def job(jid: str, cls: str = "Echo", args=None, **extra) -> dict:
    return {"retry": True, "queue": "default", "args": args if args is not None else [jid], "class": cls,
            "jid": jid, "created_at": NOW - 100, **extra}


def raw(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def jid_of(n: int) -> str:
    return f"{n:024x}"


@pytest.fixture
def fixed(config) -> Client:
    return Client(config, clock=lambda: NOW)


# -- Stats -------------------------------------------------------------------------------------
def test_stats_snapshot_names_every_number(fixed, r):
    r.set("stat:processed", 120)
    r.set("stat:failed", 7)
    r.zadd("schedule", {raw(job(jid_of(1))): NOW + 60})
    r.zadd("retry", {raw(job(jid_of(2))): NOW + 60, raw(job(jid_of(3))): NOW + 90})
    r.zadd("dead", {raw(job(jid_of(4))): NOW})
    r.sadd("queues", "default", "mail", "empty")
    r.lpush("queue:default", raw(job(jid_of(5), enqueued_at=NOW - 4.5)))
    r.lpush("queue:mail", *(raw(job(jid_of(10 + n), enqueued_at=NOW - 1)) for n in range(3)))
    r.sadd("sidequest:paused", "mail")
    r.sadd("processes", "host:1:a", "host:2:b")
    r.hset("host:1:a", mapping={"info": json.dumps({"hostname": "host"}), "busy": 2, "beat": NOW})
    r.hset("host:2:b", mapping={"info": json.dumps({"hostname": "host"}), "busy": 1, "beat": NOW})
    stats = Stats(fixed)
    assert (stats.processed, stats.failed, stats.enqueued) == (120, 7, 4)
    assert (stats.scheduled_size, stats.retry_size, stats.dead_size) == (1, 2, 1)
    assert (stats.processes_size, stats.workers_size) == (2, 3)
    assert stats.queues == {"mail": 3, "default": 1, "empty": 0}
    assert list(stats.queues) == ["mail", "default", "empty"]  # largest first, as Sidekiq's
    assert stats.default_queue_latency == pytest.approx(4.5)
    mail = stats.queue_summaries[0]
    assert (mail.name, mail.size, mail.latency, mail.paused) == ("mail", 3, pytest.approx(1.0), True)
    data = stats.as_dict()
    assert data["retry_size"] == 2 and data["queues"][1] == {"name": "default", "size": 1,
                                                             "latency": pytest.approx(4.5), "paused": False}
    stats.reset("failed")
    assert Stats(fixed).failed == 0 and Stats(fixed).processed == 120
    with pytest.raises(ValueError, match="unknown stat"):
        stats.reset("lost")


def test_history_by_day_newest_first(fixed, r):
    r.set("stat:processed:2027-01-15", 10)
    r.set("stat:processed:2027-01-13", 3)
    r.set("stat:failed:2027-01-14", 2)
    history = History(3, start=date(2027, 1, 15), client=fixed)
    assert history.processed == {"2027-01-15": 10, "2027-01-14": 0, "2027-01-13": 3}
    assert list(history.failed.items()) == [("2027-01-15", 0), ("2027-01-14", 2), ("2027-01-13", 0)]
    assert list(Stats(fixed).history(2).processed) == ["2027-01-15", "2027-01-14"]  # NOW is that day
    with pytest.raises(ValueError):
        History(0, client=fixed)


def test_stats_count_a_running_worker(start, client, r):
    start(concurrency=2)
    client.push(blocker, ["release-stats"])
    client.push(echo, ["counted"])
    wait_until(lambda: Stats(client).workers_size == 1 and Stats(client).processed >= 1, message="busy, processed")
    stats = Stats(client)
    assert stats.processes_size == 1 and stats.enqueued == 0
    r.lpush("release-stats", 1)


# -- Queue -------------------------------------------------------------------------------------
def test_queue_size_latency_iteration_find_and_delete(fixed, r):
    r.sadd("queues", "default", "b-queue")
    for n in range(120):  # pushed oldest first: index 0 is the newest
        r.lpush("queue:default", raw(job(jid_of(n), enqueued_at=NOW - 200 + n)))
    queue = Queue("default", fixed)
    assert [q.name for q in Queue.all(fixed)] == ["b-queue", "default"]
    assert queue.size == 120 and queue.latency == pytest.approx(200.0)
    assert [j.jid for j in queue.page(0, 3)] == [jid_of(119), jid_of(118), jid_of(117)]
    assert [j.jid for j in queue.page(118, 50)] == [jid_of(1), jid_of(0)]
    assert [j.jid for j in queue] == [jid_of(n) for n in range(119, -1, -1)]
    found = queue.find_job(jid_of(3))
    assert found is not None and found.klass == "Echo" and found.args == [jid_of(3)] and found.queue == "default"
    assert found.enqueued_at == NOW - 197 and found.latency() == pytest.approx(197.0)
    assert found["class"] == "Echo" and found.get("missing", 1) == 1
    assert queue.find_job("f" * 24) is None
    assert found.delete() is True and found.delete() is False  # the second finds nothing to remove
    assert queue.size == 119 and queue.find_job(jid_of(3)) is None


def test_iteration_survives_deleting_what_it_yields(fixed, r):
    for n in range(130):
        r.lpush("queue:default", raw(job(jid_of(n))))
        r.zadd("retry", {raw(job(jid_of(n))): NOW + n})
    queue, retries = Queue("default", fixed), RetrySet(fixed)
    assert sum(record.delete() for record in queue) == 130 and queue.size == 0
    assert sum(entry.delete() for entry in retries) == 130 and retries.size == 0


def test_queue_clear_deletes_each_job_and_forgets_the_name(fixed, r):
    r.sadd("queues", "default")
    r.lpush("queue:default", *(raw(job(jid_of(n))) for n in range(1200)), b"not json")
    queue = Queue("default", fixed)
    assert queue.clear() == 1201
    assert queue.size == 0 and not r.sismember("queues", "default") and Queue.all(fixed) == []


def test_pause_unpause_and_paused(fixed, r):
    queue = Queue("mail", fixed)
    assert queue.paused is False
    queue.pause()
    assert queue.paused is True and r.smembers("sidequest:paused") == {b"mail"}
    queue.unpause()
    assert queue.paused is False


def test_a_paused_queue_is_skipped_by_a_running_worker(start, client, r):
    launcher = start(concurrency=2, queues=("default", "other"))
    queue = Queue("default", client)
    queue.pause()
    pause_seen(launcher, "default")  # every worker reads the paused set at most a second apart
    push_fillers(client, "default", 2)
    jid = client.push(echo, ["while paused"])
    # give a worker the chance to take it, if it were going to: it fetches again (default first)
    # for each of the later jobs of another queue
    client.push_bulk(echo, [["after", n] for n in range(8)], queue="other")
    wait_until(lambda: sum(1 for x in ran(r, "echo") if x[0] == "after") == 8, message="the later jobs")
    assert ["while paused"] not in ran(r, "echo") and queue.find_job(jid) is not None
    queue.unpause()
    wait_until(lambda: ["while paused"] in ran(r, "echo"), 15, message="the job after unpause")


# -- sorted sets -------------------------------------------------------------------------------
def fill_retries(r, count: int = 5, **extra) -> list[str]:
    jids = [jid_of(n) for n in range(count)]
    r.zadd("retry", {raw(job(jid, retry_count=2, error_class="ValueError", error_message=f"bad {n}",
                             failed_at=NOW - 50, **extra)): NOW + n for n, jid in enumerate(jids)})
    return jids


def test_sets_read_newest_first_page_find_get_and_fetch(fixed, r):
    jids = fill_retries(r, 120)
    retries = RetrySet(fixed)
    assert retries.name == "retry" and retries.size == 120
    assert [e.jid for e in retries] == list(reversed(jids))
    first = retries.page(0, 2)
    assert [e.jid for e in first] == [jids[119], jids[118]] and isinstance(first[0], SortedEntry)
    assert first[0].score == NOW + 119 and first[0].at == NOW + 119
    entry = retries.find_job(jids[7])
    assert entry is not None and entry.retry_count == 2 and entry.error_message == "bad 7" and entry.has_error
    assert entry.failed_at == NOW - 50 and entry.error_class == "ValueError"
    assert retries.find_job("f" * 24) is None
    assert retries.get(entry.key).value == entry.value
    assert [e.jid for e in retries.fetch(NOW + 7)] == [jids[7]] and retries.fetch(NOW + 7, jids[8]) == []
    data = entry.as_dict()
    assert data["jid"] == jids[7] and data["class_name"] == "Echo" and data["score"] == NOW + 7
    assert data["key"] == entry.key and data["item"]["error_message"] == "bad 7" and data["invalid"] is False
    assert [s.name for s in (ScheduledSet(fixed), RetrySet(fixed), DeadSet(fixed))] == ["schedule", "retry", "dead"]


def test_retry_moves_the_entry_to_its_queue_one_count_lower(fixed, r):
    jids = fill_retries(r, 2, queue="mail")
    entry = RetrySet(fixed).find_job(jids[0])
    assert entry.retry() is True
    assert entry.retry() is False and entry.delete() is False and entry.kill() is False  # it is gone
    [moved] = queue_items(r, "mail")
    assert moved["jid"] == jids[0] and moved["retry_count"] == 1 and moved["enqueued_at"] == NOW
    assert moved["error_message"] == "bad 0" and r.sismember("queues", "mail") and r.zcard("retry") == 1


def test_add_to_queue_runs_a_scheduled_job_now_unchanged(fixed, r):
    r.zadd("schedule", {raw(job(jid_of(1), retry_count=0, at=NOW + 60)): NOW + 60})
    entry = ScheduledSet(fixed).find_job(jid_of(1))
    assert entry.add_to_queue() is True
    [moved] = queue_items(r)
    assert moved["retry_count"] == 0 and "at" not in moved and moved["enqueued_at"] == NOW
    assert r.zcard("schedule") == 0


def test_kill_moves_the_entry_unchanged_to_dead_and_trims(config, r):
    ticks = itertools.count(1)
    client = Client(config.replace(dead_max_jobs=2), clock=lambda: NOW + next(ticks))
    jids = fill_retries(r, 3)
    stored = {e.jid: e.value for e in RetrySet(client)}
    for jid in jids:
        assert RetrySet(client).find_job(jid).kill() is True
    dead = DeadSet(client)
    assert dead.size == 2 and r.zcard("retry") == 0  # trimmed to dead_max_jobs, oldest out
    assert {e.jid: e.value for e in dead} == {jid: stored[jid] for jid in jids[1:]}
    assert [e.jid for e in dead] == [jids[2], jids[1]]  # newest death first
    assert dead.find_job(jids[1]).delete() is True and dead.size == 1


def test_reschedule_changes_the_time(fixed, r):
    r.zadd("schedule", {raw(job(jid_of(1))): NOW + 60})
    entry = ScheduledSet(fixed).find_job(jid_of(1))
    assert entry.reschedule(NOW + 600) is True and r.zscore("schedule", entry.value) == NOW + 600
    entry.delete()
    assert entry.reschedule(NOW) is False and r.zcard("schedule") == 0


def test_filters_by_job_name_and_by_text(fixed, r):
    r.zadd("retry", {raw(job(jid_of(n), cls="Mailer" if n % 2 else "Resize", args=[f"user-{n}"],
                             error_message="Timeout [after 5 s] *x?" if n % 3 == 0 else "refused")): NOW + n
                     for n in range(12)})
    r.zadd("retry", {b"not json at all": NOW})
    retries = RetrySet(fixed)
    assert sorted(e.jid for e in retries.select(name="Mailer")) == [jid_of(n) for n in range(1, 12, 2)]
    assert sorted(e.jid for e in retries.select(text="[after 5 s] *x?")) == [jid_of(n) for n in (0, 3, 6, 9)]
    assert [e.jid for e in retries.select(name="Mailer", text="user-3\"")] == [jid_of(3)]
    assert [e.args for e in retries.scan("not json")] == [["not json at all"]]
    assert sum(1 for _ in retries.select()) == 13
    assert retries.retry_all(name="Mailer", text="Timeout") == 2  # jobs 3 and 9
    assert sorted(j["jid"] for j in queue_items(r)) == [jid_of(3), jid_of(9)]
    assert retries.kill_all(text="Timeout") == 2 and r.zcard("dead") == 2  # 0 and 6
    assert retries.delete_all(name="Resize") == 4
    assert retries.retry_all() == 4 and retries.size == 1  # the bytes that are not a job stay
    assert retries.kill_all() == 1 and retries.size == 0
    assert DeadSet(fixed).add_all_to_queue(name="Resize") == 2
    assert DeadSet(fixed).clear() == 1 and r.zcard("dead") == 0


def test_an_entry_that_is_not_a_job_can_be_deleted_or_killed_not_queued(fixed, r):
    r.zadd("retry", {b"\xff not utf-8": NOW})
    [entry] = RetrySet(fixed).page()
    assert entry.invalid and entry.jid is None and entry.item == {}
    with pytest.raises(PayloadError, match="not a job"):
        entry.retry()
    assert entry.kill() is True and DeadSet(fixed).page()[0].value == b"\xff not utf-8"


def act_together(a: SortedEntry, first: str, b: SortedEntry, second: str) -> tuple[bool, bool]:
    """Two operators' actions on one entry, released at the same instant by a barrier."""
    barrier = threading.Barrier(2)
    results: dict[str, bool] = {}

    def act(name: str, entry: SortedEntry, action: str) -> None:
        barrier.wait()
        results[name] = getattr(entry, action)()

    threads = [threading.Thread(target=act, args=("a", a, first)), threading.Thread(target=act, args=("b", b, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results["a"], results["b"]


WHERE_IT_ENDS = {"retry": {"queue": 1, "retry": 0, "dead": 0}, "add_to_queue": {"queue": 1, "retry": 0, "dead": 0},
                 "delete": {"queue": 0, "retry": 0, "dead": 0}, "kill": {"queue": 0, "retry": 0, "dead": 1}}


@pytest.mark.parametrize("first,second", [("retry", "delete"), ("retry", "retry"), ("kill", "delete"),
                                          ("add_to_queue", "kill")])
def test_two_operators_on_one_entry_get_exactly_one_outcome(client, r, first, second):
    for round_ in range(50):
        jid = jid_of(round_)
        r.zadd("retry", {raw(job(jid, retry_count=1)): time.time() + 3600})
        a, b = RetrySet(client).find_job(jid), RetrySet(client).find_job(jid)
        results = act_together(a, first, b, second)
        assert sorted(results) == [False, True], (round_, results)
        winner = first if results[0] else second
        where = {"queue": r.llen("queue:default"), "retry": r.zcard("retry"), "dead": r.zcard("dead")}
        assert where == WHERE_IT_ENDS[winner], (round_, winner, where)  # nothing lost, nothing doubled
        r.delete("queue:default", "dead")


# -- times in both units -----------------------------------------------------------------------
def test_times_in_float_seconds_and_sidekiq8_milliseconds(fixed, r):
    ms = int(NOW * 1000)
    r.lpush("queue:ms", raw(job(jid_of(1), created_at=ms - 9000, enqueued_at=ms - 5000)))
    r.lpush("queue:float", raw(job(jid_of(2), enqueued_at=NOW - 5.0)))
    r.sadd("queues", "ms", "float")
    assert Queue("ms", fixed).latency == pytest.approx(5.0) and Queue("float", fixed).latency == pytest.approx(5.0)
    assert {q.name: q.latency for q in Stats(fixed).queue_summaries} == {"ms": pytest.approx(5.0),
                                                                          "float": pytest.approx(5.0)}
    record = Queue("ms", fixed).page()[0]
    assert record.enqueued_at == NOW - 5 and record.created_at == NOW - 9 and record.latency() == pytest.approx(5.0)
    r.zadd("retry", {raw(job(jid_of(3), created_at=ms, failed_at=ms - 2000, retry_count=0)): NOW + 10})
    entry = RetrySet(fixed).find_job(jid_of(3))
    assert entry.failed_at == NOW - 2 and entry.score == NOW + 10
    assert entry.retry() is True
    moved = queue_items(r, "default")[0]
    assert moved["enqueued_at"] == ms and type(moved["enqueued_at"]) is int  # the payload keeps its unit
    r.sadd("processes", "ruby:8:x")
    r.hset("ruby:8:x", mapping={"info": json.dumps({"hostname": "ruby", "started_at": ms - 60_000}),
                                "busy": 1, "beat": ms})
    r.hset("ruby:8:x:work", "t1", json.dumps({"queue": "default", "payload": json.dumps(job(jid_of(4))),
                                              "run_at": ms - 3000}))
    process = ProcessSet(fixed).get("ruby:8:x")
    assert process.beat == NOW and process.started_at == NOW - 60
    assert [w.run_at for w in Workers(fixed)] == [NOW - 3]


# -- tasks -------------------------------------------------------------------------------------
def test_operator_actions_on_task_jobs_update_their_events(start, client, r):
    task = Task.create("operated", client=client)
    killed = task.add(echo, "kill me", in_=3600)
    deleted = task.add(echo, "delete me", in_=3600)
    kept = task.add(echo, "keep me", in_=3600)
    task.seal()

    def event(jid):
        return next(e for e in task.events() if e["jid"] == jid)

    assert ScheduledSet(client).find_job(killed).kill() is True
    assert event(killed)["status"] == "error" and event(killed)["messages"][-1]["text"] == "killed by an operator"
    assert ScheduledSet(client).find_job(deleted).delete() is True
    assert event(deleted)["status"] == "error" and event(deleted)["messages"][-1]["text"] == "deleted by an operator"
    assert DeadSet(client).find_job(killed).retry() is True
    assert event(killed)["status"] == "enqueued" and event(killed)["messages"][-1]["text"] == "requeued by an operator"
    assert task.status()["counts"] == {"enqueued": 2, "working": 0, "finished": 0, "failed": 0, "error": 1}
    assert ScheduledSet(client).find_job(kept).add_to_queue() is True
    start()
    wait_until(lambda: task.status()["done"], message="the task to complete")
    assert task.status()["counts"] == {"enqueued": 0, "working": 0, "finished": 2, "failed": 0, "error": 1}
    assert sorted(ran(r, "echo")) == [["keep me"], ["kill me"]]


def test_clearing_a_queue_of_task_jobs_ends_their_events(client, r):
    task = Task.create("cleared", client=client)
    task.add_bulk(echo, [[n] for n in range(3)])
    task.seal()
    assert Queue("default", client).clear() == 3
    status = task.status()
    assert status["counts"]["error"] == 3 and status["done"] is True


# -- processes and running work ------------------------------------------------------------------
def test_process_set_workers_quiet_and_stop(start, client, r):
    launcher = start(concurrency=3)
    client.push(blocker, ["release-ps"])
    busy = wait_until(lambda: [w for w in Workers(client)], message="the blocker to show as running")
    [process] = list(ProcessSet(client))
    assert process.identity == launcher.identity and process.concurrency == 3 and process.queues == ["default"]
    assert process.pid is not None and process.beat is not None and process.stopping is False
    assert process.as_dict()["identity"] == launcher.identity and ProcessSet(client).size == 1
    assert ProcessSet(client).total_concurrency == 3 and ProcessSet(client).get("nobody:1:x") is None
    [running] = busy
    assert running.process_id == launcher.identity and running.queue == "default"
    assert running.job.klass == "Blocker" and running.job.args == ["release-ps"]
    assert abs(running.run_at - time.time()) < 30 and WorkSet is Workers
    assert Workers(client).find_work(running.job.jid) == running and Workers(client).find_work("0" * 24) is None
    wait_until(lambda: Workers(client).size == 1, message="busy in the heartbeat")
    process.quiet()
    wait_until(lambda: ProcessSet(client).get(launcher.identity).stopping, message="quiet through the signal list")
    r.lpush("release-ps", 1)
    ProcessSet(client).get(launcher.identity).stop()
    wait_until(launcher.stopped.is_set, message="stop through the signal list")
    assert list(ProcessSet(client)) == []


def test_cleanup_drops_processes_whose_heartbeat_expired(fixed, r):
    r.sadd("processes", "gone:1:a", "here:2:b")
    r.hset("here:2:b", mapping={"info": "{}", "busy": 0, "beat": NOW})
    assert [p.identity for p in ProcessSet(fixed)] == ["here:2:b"]
    assert r.smembers("processes") == {b"here:2:b"}


# -- metrics -----------------------------------------------------------------------------------
def test_metrics_per_job_name(start, client, r):
    start()
    client.push_bulk(work, [[n, 0.01] for n in range(4)])
    query = MetricsQuery(client)
    found = wait_until(lambda: [j for j in query.top_jobs(minutes=5) if j.name == "Work" and j.runs == 4],
                       message="metrics written with a heartbeat")
    summary = found[0]
    assert summary.failed == 0 and summary.failure_rate == 0.0 and summary.total_ms >= 40
    assert 0 < summary.p50_ms <= summary.p95_ms <= summary.p99_ms
    assert len(summary.series) == 5 and sum(p.runs for p in summary.series) == 4
    assert query.for_job("Work", minutes=5).runs == 4
    nothing = query.for_job("NeverRan", minutes=10)
    assert nothing.runs == 0 and len(nothing.series) == 10 and nothing.p99_ms == 0.0


# -- scale -------------------------------------------------------------------------------------
def test_a_retry_set_of_100_000_pages_and_finds_fast(private_redis, config):
    fixed = Client(config.replace(redis_url=private_redis.url(0)), clock=lambda: NOW)
    r = fixed.redis
    pipe = r.pipeline(transaction=False)
    for start_at in range(0, 100_000, 10_000):
        pipe.zadd("retry", {raw(job(jid_of(n), retry_count=0, error_message="boom")): NOW + n
                            for n in range(start_at, start_at + 10_000)})
    pipe.execute()
    retries = RetrySet(fixed)
    took, page = cpu_cost(lambda: retries.page(0, 50), private_redis, 3)
    assert took < 0.5 and [e.jid for e in page][:2] == [jid_of(99_999), jid_of(99_998)] and len(page) == 50
    took, page = cpu_cost(lambda: retries.page(50_000, 50), private_redis, 3)
    assert took < 0.5 and page[0].jid == jid_of(49_999)
    took, found = cpu_cost(lambda: retries.find_job(jid_of(73_456)), private_redis, 3)
    assert took < 2.0 and found.jid == jid_of(73_456)
    took, found = cpu_cost(lambda: retries.find_job("f" * 24), private_redis, 3)  # missing: the whole set is walked
    assert took < 2.0 and found is None


# -- the guide -----------------------------------------------------------------------------------
def admin_api_snippets() -> list[str]:
    """The Python blocks of docs/operations.md's "Admin API" section (other sections are others')."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("\n## Admin API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_operations_guide_snippets_run_as_written(config, r, monkeypatch, capsys):  # capsys: quiet prints
    monkeypatch.setattr("sidequest.client.sync_client._default", None)
    sidequest.configure(config)
    snippets = admin_api_snippets()
    assert len(snippets) >= 6
    r.zadd("retry", {raw(job(jid_of(1), cls="SendWelcome", error_message="Timeout")): time.time() + 60})
    for snippet in snippets:
        exec(compile(snippet, "docs/operations.md", "exec"), {})  # each on its own, in order
    assert r.llen("queue:mail") == 1  # the scheduled job run now; the queued one deleted
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
