"""The admin API, the CLI and the dashboard on a real Redis Cluster (three primaries, a replica
each): jobs pushed onto 50 queues spread over the primaries, every number checked against what
each primary holds, every action checked to stay in its queue's slot, and no CROSSSLOT anywhere
(a primary counts every CROSSSLOT error it answers: `INFO errorstats`, checked after each test)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from click.testing import CliRunner
from conftest import redis_server_binary
from lane_state import lane_keys, scene
from starlette.testclient import TestClient
from topology import ClusterSet

import sidequest
from sidequest import Client, Config
from sidequest.api import (
    Cluster,
    DeadSet,
    History,
    Load,
    ProcessSet,
    Queue,
    QueueLoad,
    RetrySet,
    ScheduledSet,
    Stats,
    Workers,
    groups,
    lanes,
    pause_group,
)
from sidequest.cli import main
from sidequest.web import create_app
from sidequest.web.security import COOKIE

QUEUES = [f"q{i:02d}" for i in range(50)]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterSet]:
    with ClusterSet(redis_server_binary()) as c:
        yield c


def primaries(client: Client) -> list[redis.Redis]:
    """A plain client on each primary (to read what it holds, or flush it)."""
    cluster_client: object = client.redis
    assert isinstance(cluster_client, redis.RedisCluster)
    return [cluster_client.get_redis_connection(node) for node in cluster_client.get_primaries()]


@pytest.fixture
def client(cluster: ClusterSet) -> Iterator[Client]:
    """A client on the cluster, every primary flushed; fails the test if any primary answered a
    command with CROSSSLOT meanwhile."""
    chosen = Client(Config(redis_url=cluster.url()))
    for node in primaries(chosen):
        node.flushall()
        node.config_resetstat()
    yield chosen
    for node in primaries(chosen):
        assert "errorstat_CROSSSLOT" not in node.info("errorstats"), node
    chosen.redis.close()


@pytest.fixture
def fixed(cluster: ClusterSet, client: Client) -> Client:
    """The same cluster, with a fixed clock."""
    return Client(Config(redis_url=cluster.url()), clock=lambda: NOW)


def failed(client: Client, kind: str, queue: str, n: int, at: float, cls: str = "Boom") -> str:
    """A failed job stored straight into `retry:{queue}` or `dead:{queue}`, as a worker leaves it."""
    jid = f"{n:024x}"
    payload = {"class": cls, "args": [n], "queue": queue, "jid": jid, "retry": 3, "retry_count": 1,
               "created_at": at - 100, "enqueued_at": at - 50, "failed_at": at - 50,
               "error_class": "ValueError", "error_message": f"bad {n}"}
    key = client.keys.retry(queue) if kind == "retry" else client.keys.dead(queue)
    client.redis.zadd(key, {json.dumps(payload, separators=(",", ":")): at})
    return jid


def held(client: Client, pattern: str, count: str) -> int:
    """What the primaries hold in every key matching `pattern`, added up (LLEN or ZCARD of each)."""
    return sum(int(node.execute_command(count, key)) for node in primaries(client)
               for key in node.scan_iter(match=pattern, count=1000))


@pytest.fixture
def spread(client: Client) -> dict[str, list[str]]:
    """Jobs on 50 queues (1 to 4 each, pushed), one scheduled job per queue (pushed), retries on
    20 queues and dead jobs on 10 (stored as a worker leaves them). jids by where they are."""
    made: dict[str, list[str]] = {"queued": [], "scheduled": [], "retry": [], "dead": []}
    for i, name in enumerate(QUEUES):
        made["queued"] += [j for j in client.push_bulk("Echo", [[name, k] for k in range(i % 4 + 1)], queue=name) if j]
        made["scheduled"].append(client.push("Echo", [name], queue=name, in_=600 + i) or "")
    for i, name in enumerate(QUEUES[:20]):
        made["retry"].append(failed(client, "retry", name, 1000 + i, NOW + 10 * ((i * 7) % 20)))
    for i, name in enumerate(QUEUES[::5]):
        made["dead"].append(failed(client, "dead", name, 2000 + i, NOW - i))
    return made


# -- numbers -----------------------------------------------------------------------------------
def test_queues_spread_over_the_three_primaries(cluster, client, spread):
    view = Cluster(client)
    assert len(view.shards) == 3
    assert {view.queues[name] for name in QUEUES} == {f"{h}:{p}" for h, p in cluster.primaries()}
    for name in QUEUES:
        assert view.node_of(name) == f"127.0.0.1:{cluster.node_of(client.keys.queue(name))}"
    assert sum(shard.slots for shard in view.shards) == 16384
    assert sorted(q for shard in view.shards for q in shard.queues) == QUEUES
    assert sum(shard.keys or 0 for shard in view.shards) == sum(node.dbsize() for node in primaries(client))
    assert all(len(shard.replicas) == 1 for shard in view.shards)


def test_stats_add_up_what_each_primary_holds(client, spread):
    client.redis.set("stat:processed", 120)
    client.redis.set("stat:failed", 7)
    stats = Stats(client)
    assert stats.enqueued == held(client, "queue:{*}", "LLEN") == len(spread["queued"])
    assert stats.scheduled_size == held(client, "schedule:{*}", "ZCARD") == 50
    assert stats.retry_size == held(client, "retry:{*}", "ZCARD") == 20
    assert stats.dead_size == held(client, "dead:{*}", "ZCARD") == 10
    assert (stats.processed, stats.failed) == (120, 7)
    assert stats.queues == {name: Queue(name, client).size for name in QUEUES}
    assert all(q.latency >= 0 and not q.paused for q in stats.queue_summaries)
    for default_key in ("queue:q00", "schedule", "retry", "dead"):  # Sidekiq's names: not used here
        assert not any(list(node.scan_iter(match=default_key)) for node in primaries(client))


def test_history_and_reset_read_and_write_one_key_at_a_time(fixed):
    day = datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%d")
    fixed.redis.set(f"stat:processed:{day}", 5)
    fixed.redis.set(f"stat:failed:{day}", 2)
    fixed.redis.set("stat:processed", 9)
    history = History(3, client=fixed)
    assert history.processed[day] == 5 and history.failed[day] == 2 and len(history.processed) == 3
    Stats(fixed).reset()
    assert Stats(fixed).processed == 0


# -- sets --------------------------------------------------------------------------------------
def newest_first(client: Client, kind: str) -> list[str]:
    """The jids of every queue's `kind` set, by score, highest first, read from each primary."""
    found = []
    for node in primaries(client):
        for key in node.scan_iter(match=f"{kind}:{{*}}"):
            found += [(score, json.loads(value)["jid"]) for value, score in node.zrange(key, 0, -1, withscores=True)]
    return [jid for _, jid in sorted(found, reverse=True)]


def test_a_set_is_every_queues_set_merged_newest_first(client, spread):
    for jobs, kind, size in ((RetrySet(client), "retry", 20), (DeadSet(client), "dead", 10),
                             (ScheduledSet(client), "schedule", 50)):
        expected = newest_first(client, kind)
        assert jobs.size == len(expected) == size
        assert [e.jid for e in jobs] == expected
        assert [e.jid for e in jobs.page(0, 7)] == expected[:7]
        assert [e.jid for e in jobs.page(5, 8)] == expected[5:13]
        assert jobs.page(size, 10) == []
        for entry in jobs.page(0, size):
            assert entry.set_key == f"{kind}:{{{entry.home}}}" and entry.home == entry.queue
    assert RetrySet(client).name == "retry"


def test_iteration_walks_past_entries_its_own_actions_removed(client, spread, monkeypatch):
    monkeypatch.setattr("sidequest.api.sets.PAGE", 2)  # several reads per queue's set
    for i, name in enumerate(QUEUES[:3]):
        for k in range(5):
            failed(client, "retry", name, 5000 + 10 * i + k, NOW + 1000 + 7 * k + i)
    expected = newest_first(client, "retry")
    retries = RetrySet(client)
    seen = []
    for index, entry in enumerate(retries):
        seen.append(entry.jid)
        if index % 2 == 0:
            assert entry.delete()
    assert seen == expected
    assert RetrySet(client).size == len(expected) // 2


def test_find_get_fetch_and_filters_look_in_every_queue(client, spread):
    retries = RetrySet(client)
    jid = spread["retry"][13]
    entry = retries.find_job(jid)
    assert entry is not None and entry.home == "q13" and entry.set_key == "retry:{q13}"
    assert retries.get(entry.key).jid == jid
    assert [e.jid for e in retries.fetch(entry.raw_score)] == [jid]
    assert retries.find_job("f" * 24) is None
    assert {e.jid for e in retries.select(name="Boom")} == set(spread["retry"])
    assert [e.jid for e in retries.scan("bad 1007")] == [spread["retry"][7]]


def test_retry_kill_delete_move_an_entry_within_its_queues_slot(client, spread):
    keys = client.keys
    entry = RetrySet(client).find_job(spread["retry"][3])
    assert entry.retry() is True
    assert entry.retry() is False  # gone: the second operator's click writes nothing
    assert client.redis.zcard(keys.retry("q03")) == 0
    back = json.loads(client.redis.lindex(keys.queue("q03"), 0))
    assert back["jid"] == entry.jid and back["retry_count"] == 0

    scheduled = ScheduledSet(client).find_job(spread["scheduled"][8])
    assert scheduled.kill() is True
    assert client.redis.zcard(keys.schedule("q08")) == 0
    assert [json.loads(v)["jid"] for v in client.redis.zrange(keys.dead("q08"), 0, -1)] == [scheduled.jid]
    dead = DeadSet(client).find_job(scheduled.jid)
    assert dead.set_key == keys.dead("q08") and dead.kill() is True  # killed again: stays, a new time
    assert dead.delete() is True and DeadSet(client).find_job(scheduled.jid) is None

    run_now = ScheduledSet(client).find_job(spread["scheduled"][9])
    assert run_now.reschedule(NOW + 5) and ScheduledSet(client).find_job(run_now.jid).score == NOW + 5
    assert run_now.add_to_queue() is True
    assert json.loads(client.redis.lindex(keys.queue("q09"), 0))["jid"] == run_now.jid


def test_the_all_actions_act_queue_by_queue(client, spread):
    assert RetrySet(client).retry_all(name="Boom") == 20
    assert RetrySet(client).size == 0
    for jid, name in zip(spread["retry"], QUEUES[:20], strict=True):
        assert jid in client.redis.lindex(Queue(name, client).key, 0).decode()
    assert ScheduledSet(client).kill_all(text="q1") == 10  # q10..q19
    assert all(client.redis.zcard(client.keys.dead(f"q1{i}")) == (2 if i % 5 == 0 else 1) for i in range(10))
    assert DeadSet(client).size == 10 + 10
    assert DeadSet(client).delete_all(name="Boom") == 10
    assert DeadSet(client).retry_all() == 10 and DeadSet(client).size == 0
    assert ScheduledSet(client).add_all_to_queue() == 40
    assert Stats(client).enqueued == len(spread["queued"]) + 20 + 10 + 40
    assert ScheduledSet(client).clear() == 0


# -- queues ------------------------------------------------------------------------------------
def test_queues_size_latency_find_clear(fixed, spread):
    assert [q.name for q in Queue.all(fixed)] == QUEUES
    q = Queue("q23", fixed)  # 4 jobs, one scheduled, no retry or dead
    assert q.key == "queue:{q23}" and q.size == 4 == len(list(q))
    oldest = json.loads(fixed.redis.lindex(q.key, -1))
    assert q.latency == pytest.approx(NOW - oldest["enqueued_at"])
    job = q.find_job(json.loads(fixed.redis.lindex(q.key, 0))["jid"])
    assert job is not None and job.delete() is True and q.size == 3
    q.pause()
    assert q.paused and Stats(fixed).queues["q23"] == 3
    q.unpause()
    assert q.clear() == 3 and q.size == 0
    assert "q23" in [x.name for x in Queue.all(fixed)]  # its scheduled job keeps it listed (the poller reads it)
    assert ScheduledSet(fixed).find_job(spread["scheduled"][23]).delete()
    assert Queue("q23", fixed).clear() == 0
    assert "q23" not in [x.name for x in Queue.all(fixed)]


# -- cancel, lookup ----------------------------------------------------------------------------
def test_cancel_finds_a_job_where_it_waits_or_runs(client, spread):
    keys = client.keys
    assert sidequest.cancel(spread["scheduled"][21], client=client) is True
    assert client.redis.zcard(keys.schedule("q21")) == 0
    queued = json.loads(client.redis.lindex(keys.queue("q22"), 0))["jid"]
    assert sidequest.cancel(queued, client=client) is True
    assert queued.encode() not in b"".join(client.redis.lrange(keys.queue("q22"), 0, -1))
    assert sidequest.cancel(spread["retry"][4], client=client) is True
    running = {"class": "Echo", "args": [], "queue": "q30", "jid": "ab" * 12, "retry": True}
    held_by = keys.reserved("host:1:abc", 0, "q30")
    client.redis.lpush(held_by, json.dumps(running))
    client.redis.sadd(keys.reservations("q30"), held_by)
    assert sidequest.cancel(running["jid"], client=client) is True
    assert client.redis.exists(f"sidequest:cancel:{running['jid']}")
    assert sidequest.cancel("cd" * 12, client=client) is False


def test_status_searches_each_queues_keys(client, spread):
    keys = client.keys
    queued = json.loads(client.redis.lindex(keys.queue("q40"), 0))["jid"]
    running = {"class": "Echo", "args": [], "queue": "q41", "jid": "ef" * 12, "retry": True}
    held_by = keys.reserved("host:1:abc", "batch", "q41")
    client.redis.lpush(held_by, json.dumps(running))
    client.redis.sadd(keys.reservations("q41"), held_by)
    assert sidequest.status(spread["scheduled"][42], client=client) == "scheduled"
    assert sidequest.status(queued, client=client) == "queued"
    assert sidequest.status(queued, queue="q40", client=client) == "queued"
    assert sidequest.status(queued, queue="q39", client=client) == "unknown"
    assert sidequest.status(running["jid"], client=client) == "running"
    assert sidequest.status(spread["retry"][11], client=client) == "retry"
    assert sidequest.status(spread["dead"][2], client=client) == "dead"
    assert sidequest.status("0" * 24, client=client) == "unknown"


# -- processes ---------------------------------------------------------------------------------
def test_processes_and_their_work_read_key_by_key(client):
    identity = "host:77:abcd"
    info = {"hostname": "host", "pid": 77, "queues": ["q01"], "concurrency": 5, "started_at": NOW}
    client.redis.sadd("processes", identity, "gone:1:x")
    client.redis.hset(identity, mapping={"info": json.dumps(info), "busy": 1, "beat": NOW, "quiet": "false"})
    work = {"queue": "q01", "run_at": NOW, "payload": json.dumps({"class": "Echo", "jid": "12" * 12, "args": []})}
    client.redis.hset(f"{identity}:work", "tid-1", json.dumps(work))
    assert [p.identity for p in ProcessSet(client)] == [identity]  # the expired one is dropped
    assert ProcessSet(client).get(identity).concurrency == 5
    assert [w.job.jid for w in Workers(client)] == ["12" * 12] and Workers(client).size == 1
    assert Stats(client).workers_size == 1 and Stats(client).processes_size == 1
    assert Load(client).queues["q01"] == QueueLoad(busy=1, capacity=5)  # /metrics' busy and capacity
    ProcessSet(client).get(identity).quiet()
    assert client.redis.lrange(f"{identity}-signals", 0, -1) == [b"TSTP"]


# -- the dashboard -----------------------------------------------------------------------------
def test_the_dashboard_shows_the_whole_cluster(cluster, client, spread):
    name = "<i>odd</i>"
    client.push("Echo", [], queue=name)
    http = TestClient(create_app(client), headers={"Accept": "text/html"})
    page = http.get("/")
    assert page.status_code == 200 and "Redis Cluster" in page.text and "3 primaries, 3 replicas" in page.text
    view = http.get("/cluster")
    assert view.status_code == 200 and 'href="/cluster" aria-current="page"' in view.text
    primaries_table = view.text.split('id="cluster-primaries"')[1].split("</table>")[0]
    assert sorted(re.findall(r'<td class="lead mono">([^<]+)<', primaries_table)) == sorted(
        f"{h}:{p}" for h, p in cluster.primaries())
    rows = re.findall(r'<td class="lead"><a href="[^"]+">([^<]+)</a></td>\s*<td class="mono" data-label="Primary">'
                      r'([^<]+)</td>', view.text.split('id="cluster-queues"')[1])
    shown = {queue: node for queue, node in rows}
    assert "&lt;i&gt;odd&lt;/i&gt;" in shown and "<i>odd</i>" not in view.text
    for queue in QUEUES:
        assert shown[queue] == f"127.0.0.1:{cluster.node_of(client.keys.queue(queue))}"
    for path in ("/queues", "/queues/q07", "/retries", "/retries?page=2", "/retries?q=Boom&by=name", "/scheduled",
                 "/dead", "/busy", "/api/stats", "/metrics", "/job-metrics", "/periodic", "/tasks", "/workflows"):
        assert http.get(path).status_code == 200, path
    assert "bad 1005" in http.get("/retries").text
    single = Client(Config(redis_url="redis://127.0.0.1:1/0"))  # never reached: the route is not there
    assert TestClient(create_app(single)).get("/cluster").status_code == 404


def test_the_dashboard_actions_move_entries_in_their_slots(client, spread):
    http = TestClient(create_app(client), headers={"Accept": "text/html"})
    http.get("/retries")
    token = http.cookies[COOKIE]
    entry = RetrySet(client).find_job(spread["retry"][6])
    done = http.post("/retries/actions", data={"csrf": token, "do": "retry", "key": entry.key}, follow_redirects=False)
    assert done.status_code == 303 and RetrySet(client).find_job(entry.jid) is None
    assert entry.jid in client.redis.lindex(client.keys.queue("q06"), 0).decode()
    http.post("/scheduled/actions", data={"csrf": token, "do": "kill_all"}, follow_redirects=False)
    assert ScheduledSet(client).size == 0 and DeadSet(client).size == 60
    http.post("/queues/actions", data={"csrf": token, "do": "clear", "name": "q02"}, follow_redirects=False)
    assert Queue("q02", client).size == 0


# -- the command line --------------------------------------------------------------------------
@pytest.fixture
def cli(cluster, client, monkeypatch):
    monkeypatch.setenv("REDIS_URL", cluster.url())
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    return run


def test_the_cli_reads_and_acts_on_the_whole_cluster(cluster, client, spread, cli):
    listed = json.loads(cli("queues", "--json"))["queues"]
    assert [q["name"] for q in listed] == QUEUES
    assert all(q["node"] == f"127.0.0.1:{cluster.node_of(client.keys.queue(q['name']))}" for q in listed)
    table = cli("queues")
    assert "NODE" in table and f"127.0.0.1:{cluster.node_of(client.keys.queue('q17'))}" in table
    stats = json.loads(cli("stats", "--json"))
    assert (stats["retry_size"], stats["dead_size"], stats["scheduled_size"]) == (20, 10, 50)
    assert len(stats["cluster"]) == 3 and sum(len(s["queues"]) for s in stats["cluster"]) == 50
    assert "Cluster" in cli("stats") and "PRIMARY" in cli("stats")
    assert json.loads(cli("retries", "list", "--json", "--limit", "5"))["size"] == 20
    cli("retries", "retry", spread["retry"][2])
    assert client.redis.zcard(client.keys.retry("q02")) == 0
    assert "10 jobs" in cli("dead", "retry", "--all")
    assert "q05" in cli("queues", "show", "q05")
    assert "40 more queues" in cli("top", "--once")
    cli("processes")


def test_a_queues_groups_are_read_paused_and_cleared_in_its_slot(cluster, client, cli):
    assert cluster.node_of(client.keys.lanes("q07")) != cluster.node_of(client.keys.lanes("q31"))  # two primaries
    pushed = {name: scene(client, name) for name in ("q07", "q31")}
    assert [(g.name, g.waiting, g.running, g.concurrency) for g in groups("q07", client=client)] == [
        ("tenant-b", 10, 0, None), ("tenant-a", 5, 1, None), ("tenant-c", 3, 0, 2)]
    assert lanes("q07", client=client) == {9: 10, 5: 5 + 3, 0: 7}
    pause_group("q07", "tenant-a", client=client)
    assert [g.name for g in groups("q07", client=client) if g.paused] == ["tenant-a"]
    assert "paused" in cli("groups", "q07") and "tenant-b" in cli("groups", "q07")
    cli("groups", "q07", "--resume", "tenant-a")
    assert not any(g.paused for g in groups("q07", client=client))
    http = TestClient(create_app(client), headers={"Accept": "text/html"})
    assert "tenant-b" in http.get("/queues/q07").text.split('id="groups"')[1]
    assert Queue("q07", client).clear() == pushed["q07"]
    assert lane_keys(client, "q07") == [] and groups("q07", client=client) == []
    assert len(lane_keys(client, "q31")) > 5 and lanes("q31", client=client) == {9: 10, 5: 8, 0: 7}


# -- last: it switches a primary and its replica ------------------------------------------------
def test_a_batch_of_moves_read_before_a_failover_still_lands_once(cluster, client, spread):
    retries = RetrySet(client)
    entries = list(retries)  # read with the slot map of before
    cluster.manual_failover(cluster.node_of(client.keys.retry("q00")))
    calls = [retries.actions.requeue(e.set_key, e.value, e.item, retry=True, home=e.home) for e in entries]
    assert retries.actions.many(calls) == [True] * 20
    assert retries.actions.many(calls) == [False] * 20
    assert RetrySet(client).size == 0 and Stats(client).enqueued == len(spread["queued"]) + 20
