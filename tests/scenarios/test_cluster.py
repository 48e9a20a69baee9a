"""Cluster mode on a real Redis Cluster (3 primaries, a replica each, see topology.ClusterSet):
every kind of job on 50 queues spread over the primaries, unique and periodic jobs, recovery
after a worker's kill -9, and a primary's failover under load with `wait_replicas`.

The admin API, CLI and dashboard in Cluster mode are tested in scenarios/test_cluster_admin.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis
from conftest import STARTUP, redis_server_binary, wait_until
from topology import ClusterPrimaryOf as PrimaryOf
from topology import ClusterSet, runs_in

import sidequest
from sidequest import Config
from sidequest.client.sync_client import Client
from sidequest.errors import ConfigError, JobArgumentError
from sidequest.features.periodic.entries import make_entry
from sidequest.features.periodic.scheduler import PeriodicScheduler
from sidequest.periodic import forget
from sidequest.periodic import status as periodic_status
from sidequest.store import keys
from sidequest.store.connection import connect
from sidequest.store.keys import CLUSTER, DEFAULT, space
from sidequest.worker.launcher import Launcher

QUEUES = [f"q{i:02d}" for i in range(50)]
FAST = {"heartbeat_interval": 0.5, "heartbeat_ttl": 2.0, "recovery_interval": 0.5, "poll_interval": 0.2,
        "fetch_timeout": 0.5}

RAN: Counter[str] = Counter()  # what the in-process jobs below ran: "<kind>:<n>"
_ran_lock = threading.Lock()


def _note(what: str) -> None:
    with _ran_lock:
        RAN[what] += 1


@sidequest.job(name="ClusterPlain")
def cluster_plain(n: int) -> None:
    _note(f"plain:{n}")


@sidequest.job(name="ClusterScheduled")
def cluster_scheduled(n: int) -> None:
    _note(f"scheduled:{n}")


@sidequest.job(name="ClusterFlaky", retry=1, retry_in=lambda count, exc: 0.01)
def cluster_flaky(n: int) -> None:
    _note(f"flaky:{n}")
    raise RuntimeError(f"flaky {n} fails on every attempt")


@sidequest.job(name="ClusterUnique", unique_for=60)
def cluster_unique(n: int) -> None:
    _note(f"unique:{n}")


@pytest.fixture(scope="module")
def cluster():
    with ClusterSet(redis_server_binary()) as topology:
        yield topology


@pytest.fixture
def url(cluster):
    """The cluster's URL, every primary emptied first."""
    cluster.wait_settled()
    client = connect(cluster.url())
    for node in client.get_primaries():
        client.get_redis_connection(node).flushall()
    client.close()
    RAN.clear()
    return cluster.url()


@pytest.fixture
def rc(url):
    client = connect(url)
    yield client
    client.close()


def test_a_cluster_client_uses_the_cluster_keyspace_and_a_plain_one_sidekiqs(rc, r):
    assert space(rc) is CLUSTER and space(r) is DEFAULT
    assert CLUSTER.queue("mail") == "queue:{mail}" and DEFAULT.queue("mail") == "queue:mail"
    for key in (CLUSTER.schedule("mail"), CLUSTER.retry("mail"), CLUSTER.dead("mail"),
                CLUSTER.reserved("host:1:ab", "batch", "mail"), CLUSTER.reservations("mail"),
                CLUSTER.recovered("host:1:ab", "mail"), CLUSTER.unique("d1", "mail")):
        assert rc.keyslot(key) == rc.keyslot("queue:{mail}"), key


def test_every_kind_of_job_on_50_queues_over_3_primaries_runs_once_without_crossslot(
        cluster, url, rc, caplog):
    config = Config(redis_url=url, queues=QUEUES, concurrency=10, **FAST)
    sidequest.configure(config)
    client = Client(config)
    nodes = {cluster.node_of(CLUSTER.queue(q)) for q in QUEUES}
    assert len(nodes) == 3, "50 queues land on all three primaries"
    for i, queue in enumerate(QUEUES):
        client.push(cluster_plain, [i], queue=queue)
        client.push(cluster_scheduled, [i], queue=queue, in_=0.3)
    bulk_ids = client.push_bulk(cluster_plain, [[100 + i] for i in range(100)], queue="q07")
    assert len(bulk_ids) == 100
    for i in range(5):
        client.push(cluster_flaky, [i], queue=QUEUES[i * 9])
    assert client.push(cluster_unique, [1], queue="q11") is not None
    assert client.push(cluster_unique, [1], queue="q11") is None  # the claim is held: refused
    claims = [k for k in rc.scan_iter(match="sidequest:unique:*", target_nodes="primaries")]
    assert [k.decode().split(":")[2] for k in claims] == ["{q11}"]  # in its queue's slot

    launcher = Launcher(config)
    launcher.run()
    try:
        expected = ({f"plain:{i}" for i in range(50)} | {f"plain:{100 + i}" for i in range(100)}
                    | {f"scheduled:{i}" for i in range(50)} | {"unique:1"})
        wait_until(lambda: expected <= set(RAN), STARTUP, 0.05, "every job to run")
        # retry=1: a retry (due at once, moved back by the poller) then dead, in the job's own queue
        wait_until(lambda: sum(rc.zcard(CLUSTER.dead(QUEUES[i * 9])) for i in range(5)) == 5,
                   STARTUP, 0.05, "the failing jobs to die in their queues' dead sets")
    finally:
        launcher.stop()
    assert all(count == 1 for what, count in RAN.items() if not what.startswith("flaky")), RAN
    assert all(RAN[f"flaky:{i}"] == 2 for i in range(5)), RAN  # the first run and its one retry
    for queue in QUEUES:
        assert rc.llen(CLUSTER.queue(queue)) == 0 and rc.zcard(CLUSTER.schedule(queue)) == 0, queue
    # a finished unique job ended its claim: the same job can be pushed again
    assert client.push(cluster_unique, [1], queue="q11") is not None
    errors = [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not [m for m in errors if "CROSSSLOT" in m or "slot" in m.lower()], errors
    assert rc.scard("processes") == 0  # a clean stop removed the process
    assert sum(rc.scard(CLUSTER.reservations(q)) for q in QUEUES) == 0  # and its reserved lists


def test_a_failure_waits_in_its_queues_retry_set_not_in_sidekiqs(url, rc):
    @sidequest.job(name="ClusterLater", retry=3, retry_in=lambda count, exc: 3600.0)
    def later(n: int) -> None:
        raise RuntimeError("later")

    config = Config(redis_url=url, queues=["q03", "q30"], concurrency=2, **FAST)
    Client(config).push(later, [7], queue="q30")
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: rc.zcard(CLUSTER.retry("q30")) == 1, STARTUP, 0.05, "the failure to wait in retry:{q30}")
    finally:
        launcher.stop()
    assert rc.zcard("retry") == 0 and rc.zcard("dead") == 0  # Sidekiq's global sets are not used
    entry = rc.zrange(CLUSTER.retry("q30"), 0, 0, withscores=True)[0]
    assert entry[1] > time.time() + 3000 and b'"retry_count":0' in entry[0]


def test_a_job_taken_by_a_worker_killed_with_sigkill_runs_again_on_another(cluster, url, rc, tmp_path):
    from jobs_for_tests import logged

    from scenarios.test_reliability import Worker

    log = tmp_path / "runs.log"
    env = {"SQ_TEST_RUN_LOG": str(log)}
    queues = ["default", "q05", "q21"]
    client = Client(Config(redis_url=url))
    first = Worker(url, tmp_path, "-c", "6", "-q", "default", "-q", "q05", "-q", "q21", env=env)
    try:
        wait_until(lambda: rc.scard("processes") == 1, STARTUP, 0.05, "the first worker to register")
        for n in range(6):
            client.push(logged, [n, 3.0], queue=queues[n % 3])
        wait_until(lambda: sum(rc.llen(CLUSTER.queue(q)) for q in queues) == 0
                   and sum(rc.llen(k) for q in queues for k in _reserved_lists(rc, q)) == 6,
                   STARTUP, 0.05, "the six jobs to be taken")
        first.sigkill()
        killed = time.time()
        second = Worker(url, tmp_path, "-c", "6", "-q", "default", "-q", "q05", "-q", "q21", env=env)
        try:
            wait_until(lambda: len(runs_in(log)) == 6, STARTUP, 0.1, "the recovered jobs to run")
            recovered_in = time.time() - killed
            assert second.stop() == 0, second.output()
        finally:
            second.cleanup()
    finally:
        first.cleanup()
    assert runs_in(log) == Counter(range(6)), "each taken job ran once, on the second worker"
    assert recovered_in < 2.0 + 0.5 + 3.0 + 8.0, recovered_in  # TTL + recovery interval + job + start-up
    for q in queues:
        assert not any(rc.llen(k) for k in _reserved_lists(rc, q))


def _reserved_lists(rc: Any, queue: str) -> list[str]:
    return [k.decode() for k in rc.smembers(CLUSTER.reservations(queue))]


def test_a_periodic_tick_is_enqueued_once_among_schedulers_and_recorded(url, rc):
    config = Config(redis_url=url)
    entry = make_entry("* * * * *", cluster_plain, args=[9], queue="q17", id="every-minute")
    schedulers = [PeriodicScheduler(Client(config), lambda: [entry]) for _ in range(3)]
    tick = (int(time.time()) // 60) * 60 + 60
    assert sum(s.run_due(tick - 30) for s in schedulers) == 0  # a new entry starts from its next tick
    assert sum(s.run_due(tick + 0.01) for s in schedulers) == 1
    assert sum(s.run_due(tick + 0.02) for s in schedulers) == 0
    assert rc.llen(CLUSTER.queue("q17")) == 1
    assert float(rc.hget("sidequest:periodic:every-minute", "last_run")) == tick
    assert float(rc.hget(CLUSTER.periodic_claim("every-minute", "q17"), "last")) == tick


def test_a_periodic_entry_removed_from_the_code_is_forgotten_at_once(url, rc):
    """`forget` (`sidequest.periodic`): the entry's record and its place in the list are in two slots,
    so they are deleted in one round trip but not in one MULTI (Redis refuses a cross-slot one)."""
    client = Client(Config(redis_url=url))
    entry = make_entry("* * * * *", cluster_plain, args=[9], queue="q17", id="gone-from-the-code")
    PeriodicScheduler(client, lambda: [entry]).run_due(time.time())  # the scheduler describes it
    assert [s.id for s in periodic_status(client)] == ["gone-from-the-code"]
    assert forget("gone-from-the-code", client) is True
    assert periodic_status(client) == []
    assert not rc.sismember(keys.PERIODIC, "gone-from-the-code") and not rc.exists(keys.periodic("gone-from-the-code"))
    assert forget("gone-from-the-code", client) is False


def test_what_cluster_mode_cannot_hold_yet_is_refused_in_one_line(url):
    client = Client(Config(redis_url=url))
    with pytest.raises(JobArgumentError, match=r"Cluster mode .*retry_queue 'elsewhere' must be in the group"):
        client.push(cluster_plain, [1], retry_queue="elsewhere")
    with pytest.raises(JobArgumentError, match="brace"):
        client.push(cluster_plain, [1], queue="a{b}")
    with pytest.raises(ConfigError, match="brace"):
        Launcher(Config(redis_url=url, queues=["x{y}"])).run()


def test_a_primary_failover_under_load_loses_no_job_pushed_with_wait_replicas(cluster, url, rc, tmp_path, capsys):
    from topology import failover_under_load

    run = failover_under_load(PrimaryOf(cluster, CLUSTER.queue("default")), 1, tmp_path)
    with capsys.disabled():
        print(f"\ncluster SIGKILL of the primary of queue:{{default}}, {run.summary()}")
    assert run.lost == set()
    assert set(run.ran) <= run.confirmed | run.unconfirmed
    assert run.worker_exit == 0, run.worker_output
    assert "Traceback" not in run.worker_output
    assert "CROSSSLOT" not in run.worker_output


def test_a_manual_failover_keeps_a_worker_running(cluster, url, rc, tmp_path):
    from jobs_for_tests import logged

    from scenarios.test_reliability import Worker

    log = tmp_path / "runs.log"
    client = Client(Config(redis_url=url, wait_replicas=1, wait_timeout=2))
    worker = Worker(url, tmp_path, "-c", "4", env={"SQ_TEST_RUN_LOG": str(log)})
    try:
        wait_until(lambda: rc.scard("processes") == 1, STARTUP, 0.05, "the worker to register")
        for n in range(20):
            client.push(logged, [n])
        wait_until(lambda: len(runs_in(log)) == 20, STARTUP, 0.05, "the first jobs to run")
        cluster.manual_failover(cluster.node_of(CLUSTER.queue("default")))
        pushed = set(range(20))
        deadline = time.time() + STARTUP
        n = 20
        while n < 40 and time.time() < deadline:
            try:
                client.push(logged, [n])
                pushed.add(n)
                n += 1
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                time.sleep(0.1)  # a producer's pause before it pushes again, as an application's
        wait_until(lambda: pushed <= set(runs_in(log)), STARTUP, 0.05, "every push to run after the failover")
        assert worker.stop() == 0, worker.output()
    finally:
        worker.cleanup()
    assert "Traceback" not in worker.output()


@sidequest.job(name="ClusterTaskDone")
def cluster_task_done(task_id: str) -> None:
    _note(f"callback:{task_id}")


def test_a_task_lives_beside_its_jobs_and_completes_with_its_callback(url, rc):
    from sidequest.features.tasks import Task

    config = Config(redis_url=url, queues=["q20", "q21"], concurrency=4, **FAST)
    sidequest.configure(config)
    task = Task.create("twenty", on_complete=cluster_task_done.set(queue="q20"), queue="q20")
    assert task.id.startswith("{q20}")
    task.add_bulk(cluster_plain.set(queue="q20"), [[300 + i] for i in range(18)])
    task.add(cluster_flaky.set(queue="q20", retry=False), 1)
    task.add(cluster_plain.set(queue="q20"), 399)
    with pytest.raises(JobArgumentError, match="lives in the slot of queue 'q20'"):
        task.add(cluster_plain.set(queue="q21"), 1)
    task.seal()
    assert rc.keyslot(f"sidequest:task:{task.id}") == rc.keyslot(CLUSTER.queue("q20"))
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: RAN[f"callback:{task.id}"] == 1, STARTUP, 0.05, "the task's callback to run")
    finally:
        launcher.stop()
    status = Task.find(task.id).status()
    assert status["counts"]["finished"] == 19 and status["counts"]["error"] == 1 and status["done"], status
    assert [e["jid"] for e in Task.find(task.id).events(status="error")]  # the failure is recorded


@sidequest.job(name="ClusterAdds")
def cluster_adds(a: int, b: int) -> int:
    return a + b


def test_a_result_ttl_job_keeps_its_record_beside_it_and_its_result_is_read(url, rc):
    config = Config(redis_url=url, queues=["q40"], concurrency=2, **FAST)
    sidequest.configure(config)
    jid = cluster_adds.set(queue="q40", result_ttl=60).perform_async(2, 3)
    assert sidequest.status(jid) == "queued"
    assert rc.keyslot(CLUSTER.status(jid, "q40")) == rc.keyslot(CLUSTER.queue("q40"))
    launcher = Launcher(config)
    launcher.run()
    try:
        assert sidequest.result(jid, timeout=STARTUP) == 5
    finally:
        launcher.stop()
    assert sidequest.status(jid) == "done"


def test_the_asyncio_client_pushes_every_kind_of_job_to_its_queues_slot(url, rc):
    import asyncio

    from sidequest.client.async_client import AsyncClient

    async def push() -> list[str | None]:
        async with AsyncClient(Config(redis_url=url, wait_replicas=1, wait_timeout=5)) as client:
            return [await client.push(cluster_plain, [1], queue="q01"),
                    await client.push(cluster_plain, [2], queue="q02", in_=60),
                    *(await client.push_bulk(cluster_plain, [[3], [4]], queue="q03")),
                    await client.push(cluster_unique, [5], queue="q04"),
                    await client.push(cluster_unique, [5], queue="q04")]

    jids = asyncio.run(push())
    assert all(jids[:5]) and jids[5] is None  # the second unique copy is refused
    assert rc.llen(CLUSTER.queue("q01")) == 1 and rc.zcard(CLUSTER.schedule("q02")) == 1
    assert rc.llen(CLUSTER.queue("q03")) == 2 and rc.llen(CLUSTER.queue("q04")) == 1
    assert {m.decode() for m in rc.smembers("queues")} == {"q01", "q02", "q03", "q04"}


@sidequest.job(name="ClusterAsync")
async def cluster_async(n: int) -> None:
    _note(f"async:{n}")


LIMIT = sidequest.limiter.concurrent("cluster-stripe", 2)
WINDOW = sidequest.limiter.window("cluster-geocode", 100, per=60)
BUCKET = sidequest.limiter.bucket("cluster-github", 1000, "minute")
LEAKY = sidequest.limiter.leaky("cluster-shopify", 100, 1)
POINTS = sidequest.limiter.points("cluster-graphql", 1000, 1)


@sidequest.job(name="ClusterLimited")
def cluster_limited(n: int) -> None:
    with LIMIT, WINDOW, BUCKET, LEAKY, POINTS.within_limit(estimate=5) as used:
        used(1)
        _note(f"limited:{n}")


def test_each_limiter_kind_holds_its_limit_on_a_cluster(url):
    """Each kind keeps its state in one key (one slot): no CROSSSLOT, the same semantics."""
    client = Client(Config(redis_url=url))
    limiter = sidequest.limiter
    kinds = [limiter.concurrent("c", 2, client=client), limiter.window("w", 2, per=60, client=client),
             limiter.bucket("b", 2, "hour", client=client), limiter.leaky("l", 2, 60, client=client),
             limiter.points("p", 2, 60, client=client)]
    for kind in kinds:
        with kind, kind:
            with pytest.raises(sidequest.OverLimit) as over, kind:
                pass
            assert (over.value.delay is None) == (kind is kinds[0]), kind  # all but concurrent know the wait
    graphql = limiter.points("gql", 10, 100, client=client)
    with graphql.within_limit(estimate=8) as used:
        used(1)
    with graphql.within_limit(estimate=8):  # the estimate was corrected: 1 + 8 fits
        pass
    waits = limiter.leaky("drip", 1, 0.3, wait_timeout=5, client=client)
    with waits, waits:  # the second waited for its drip
        pass


@sidequest.job(name="ClusterWaitsForCancel")
def cluster_waits_for_cancel(n: int) -> None:
    _note(f"started:{n}")
    deadline = time.time() + STARTUP
    while not sidequest.cancelled() and time.time() < deadline:
        time.sleep(0.02)  # the job's own work between its checks, as a cooperative job's
    _note(f"saw-cancel:{n}")


class ClusterWalk(sidequest.IterableJob, name="ClusterWalk"):
    checkpoint_every = 3
    max_iteration_runtime = 0.05  # a slice ends soon: the rest is re-enqueued through `schedule:{q}`

    def build_enumerator(self, n, *, cursor):
        start = 0 if cursor is None else cursor + 1
        return ((i, i) for i in range(start, n))

    def each_iteration(self, item, n):
        time.sleep(0.005)  # the item's work: slices of 0.05 s end mid-walk
        _note(f"walk:{item}")


def test_async_limited_iterable_expiring_and_cancelled_jobs_on_50_queues(url, rc, caplog):
    config = Config(redis_url=url, queues=QUEUES, concurrency=6, **FAST)
    sidequest.configure(config)
    for i, queue in enumerate(QUEUES):
        cluster_async.set(queue=queue).perform_async(i)
        cluster_limited.set(queue=queue).perform_async(i)
    ClusterWalk.set(queue="q44").perform_async(40)
    cluster_plain.set(queue="q45", expires_in=0.001).perform_in(0.3, 999)  # expired before it can start
    cancel_me = cluster_waits_for_cancel.set(queue="q46").perform_async(1)
    scheduled = cluster_plain.set(queue="q47").perform_in(3600, 998)
    assert sidequest.cancel(scheduled)  # removed from schedule:{q47}
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: RAN["started:1"] == 1, STARTUP, 0.05, "the cancellable job to start")
        assert sidequest.cancel(cancel_me)
        expected = ({f"async:{i}" for i in range(50)} | {f"limited:{i}" for i in range(50)}
                    | {f"walk:{i}" for i in range(40)} | {"saw-cancel:1"})
        wait_until(lambda: expected <= set(RAN), STARTUP, 0.05, "every job to run")
    finally:
        launcher.stop()
    assert "plain:999" not in RAN and "plain:998" not in RAN
    assert all(RAN[f"walk:{i}"] == 1 for i in range(40)), "each item once: slices resume from the cursor"
    assert rc.zcard(CLUSTER.schedule("q47")) == 0
    assert not [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_a_task_spans_the_queues_of_a_group_which_share_one_slot(url, rc):
    from sidequest.features.tasks import Task

    resize, thumbs, done = "{media}resize", "{media}thumbs", "{media}done"
    assert len({rc.keyslot(CLUSTER.queue(q)) for q in (resize, thumbs, done)}) == 1
    assert rc.keyslot(CLUSTER.queue(resize)) == rc.keyslot("{media}")
    config = Config(redis_url=url, queues=[resize, thumbs, done], concurrency=4, **FAST)
    sidequest.configure(config)
    task = Task.create("album", on_complete=cluster_task_done.set(queue=done), queue=resize)
    assert task.id.startswith("{media}")
    task.add_bulk(cluster_plain.set(queue=resize), [[500 + i] for i in range(5)])
    task.add_bulk(cluster_plain.set(queue=thumbs), [[600 + i] for i in range(5)])
    with pytest.raises(JobArgumentError, match="slot of queue 'media'"):
        task.add(cluster_plain.set(queue="q21"), 1)
    task.seal()
    later = cluster_unique.set(queue=thumbs).perform_in(3600, 7)  # a grouped queue's schedule, unique claim
    assert later is not None and rc.zcard(CLUSTER.schedule(thumbs)) == 1
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: RAN[f"callback:{task.id}"] == 1, STARTUP, 0.05, "the group's task to complete")
    finally:
        launcher.stop()
    assert Task.find(task.id).status()["counts"]["finished"] == 10
    assert task.id in {t["id"] for t in Task.recent()[1]}
    assert {q.decode() for q in rc.smembers("queues")} >= {resize, thumbs}
    assert sidequest.cancel(later)


@sidequest.job(name="ClusterDouble")
def cluster_double(x: int) -> int:
    return 2 * x


@sidequest.job(name="ClusterTotal")
def cluster_total(values: list[int]) -> int:
    return sum(values)


@sidequest.job(name="ClusterCharge", retry=False)
def cluster_charge(order: int) -> None:
    raise sidequest.JobFailed(f"card declined for order {order}")


@sidequest.job(name="ClusterRefund")
def cluster_refund(order: int) -> str:
    _note(f"refund:{order}")
    return f"refunded {order}"


def test_workflows_run_in_the_slot_of_a_queue_group(url, rc):
    from sidequest import Workflow, chain, chord

    resize, thumbs = "{shop}resize", "{shop}thumbs"
    config = Config(redis_url=url, queues=[resize, thumbs], concurrency=4, **FAST)
    sidequest.configure(config)
    flow_id = chord([cluster_double.s(n).set(queue=resize if n % 2 else thumbs) for n in (1, 2, 3)],
                    cluster_total.s().set(queue=thumbs)).perform_async()
    assert flow_id.startswith("{shop}")
    failing = chain(cluster_charge.si(7).set(queue=resize).on_failure(cluster_refund.si(7).set(queue=thumbs)),
                    cluster_double.si(1).set(queue=resize)).perform_async()
    with pytest.raises(JobArgumentError, match="one slot"):
        chain(cluster_double.si(1).set(queue=resize), cluster_double.si(2).set(queue="q09")).perform_async()
    launcher = Launcher(config)
    launcher.run()
    try:
        flow = Workflow.find(flow_id)
        assert flow.result("4", timeout=STARTUP) == 12  # 2 + 4 + 6, the chord's callback
        wait_until(lambda: Workflow.find(failing).status()["state"] == "failed" and RAN["refund:7"] == 1,
                   STARTUP, 0.05, "the failing chain to stop and compensate")
    finally:
        launcher.stop()
    assert flow.status()["state"] == "succeeded"
    assert [s["status"] for s in Workflow.find(failing).steps()] == ["failed", "skipped"]
    assert [s["result"] for s in flow.steps()] == [2, 4, 6, 12]  # each step's record, beside its job
    assert {w["id"] for w in Workflow.recent()[1]} == {flow_id, failing}


@sidequest.job(name="ClusterFailsOnce", retry=2, retry_in=lambda count, exc: 0.01)
def cluster_fails_once(n: int) -> None:
    _note(f"attempt:{n}")
    if RAN[f"attempt:{n}"] == 1:
        raise RuntimeError("the first attempt fails")


def test_a_retry_moves_to_its_retry_queue_within_its_group(url, rc):
    first, again = "{mail}send", "{mail}retries"
    config = Config(redis_url=url, queues=[first, again], concurrency=2, **FAST)
    sidequest.configure(config)
    jid = cluster_fails_once.set(queue=first, retry_queue=again, unique_for=60, result_ttl=60).perform_async(1)
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: RAN["attempt:1"] == 2, STARTUP, 0.05, "the retry to run from its retry_queue")
        assert sidequest.result(jid, timeout=STARTUP) is None  # its record followed it: one key per group
    finally:
        launcher.stop()
    assert not list(rc.scan_iter(match="sidequest:unique:*", target_nodes="primaries"))  # the claim was ended
    assert rc.llen(CLUSTER.queue(first)) == 0 and rc.llen(CLUSTER.queue(again)) == 0


def test_jobs_moved_before_another_queues_call_fails_are_handed_to_the_process(url, rc, caplog):
    """Issue 28 item 5: a fetch makes one RESERVE per queue; when a later queue's call gets an
    error reply (here WRONGTYPE: its batch list, which the call's acknowledgement reads, is a
    string; CLUSTERDOWN, TRYAGAIN, OOM... the same), the jobs the earlier call moved into the
    first queue's batch list are still handed out, not left there unknown until the process exits."""
    import json

    from sidequest.store.direct import direct_path_for
    from sidequest.store.scripts import Scripts
    from sidequest.worker.fetch.batch import BatchList, Waiter

    caplog.set_level(logging.WARNING)
    config = Config(redis_url=url, queues=["first", "second"], concurrency=1, **FAST)
    hub = BatchList(config, "faults-host:1:0a1b2c", Scripts(rc), client=rc, ack_window=60.0)
    lane = direct_path_for(rc)
    try:
        jid = Client(config).push(cluster_plain, [1], queue="first")
        rc.set(hub.batch_of("second"), "not a list")
        hub.acknowledge(b"a success of the second queue", [0], hub.batch_of("second"))
        taken, _ = hub.take(lane, rc, 0, Waiter())
        assert taken is not None and json.loads(taken[1])["jid"] == jid
        assert rc.lrange(hub.batch_of("first"), 0, -1) == [taken[1]]
        assert any("second" in m and "WRONGTYPE" in m for m in caplog.messages), caplog.text
        assert "Redis is unavailable" not in caplog.text
    finally:
        hub.close()
        lane.close()


@pytest.mark.parametrize("mode", ["one Redis", "Cluster"])
def test_a_supervisor_recovers_exactly_one_dead_identitys_lists_at_once(mode, request):
    """Issue 28 item 13: `Recovery.recover_process` (what the supervisor calls for a child it
    reaped) puts back that identity's jobs although its heartbeat has not expired, and leaves
    a live process's reserved jobs where they are; on one Redis and on a Cluster."""
    from sidequest.worker.launcher import orphan_recovery

    url = request.getfixturevalue("url" if mode == "Cluster" else "redis_url")
    client = connect(url)
    space_ = space(client)
    try:
        config = Config(redis_url=url, queues=("q05",))
        dead, live = "host:101:deadbeef0001", "host:102:11ve00000002"
        for who in (dead, live):  # both beat: only the supervisor knows the first one is gone
            client.hset(who, mapping={"beat": time.time()})
            client.expire(who, 60)
            client.sadd("processes", who)
            key = space_.reserved(who, 0, "q05")
            client.lpush(key, f'{{"class":"X","jid":"{who[-4:]}","queue":"q05","args":[]}}')
            client.sadd(space_.reservations("q05"), key)
        recovery = orphan_recovery(config, client, "host:100:supervisor")
        assert recovery.recover_process(dead) == 1
        assert [b'"jid":"0001"' in raw for raw in client.lrange(space_.queue("q05"), 0, -1)] == [True]
        assert not client.exists(dead) and not client.sismember("processes", dead)
        assert client.llen(space_.reserved(live, 0, "q05")) == 1 and client.exists(live)
        assert not client.sismember(space_.reservations("q05"), space_.reserved(dead, 0, "q05"))
    finally:
        client.close()


def test_a_push_no_replica_of_its_slot_confirms_raises_not_replicated_on_every_path(cluster, url):
    """Issue 28 item 2: in Cluster mode the WAIT goes on the connection to the primary of the
    push's slot that wrote it: with that primary's replica frozen, a sync push, an asyncio push,
    Task.add and a workflow's start each raise NotReplicatedError after about wait_timeout."""
    import asyncio
    import signal

    from client.test_push_plan import warm_up
    from jobs_for_tests import logged

    from sidequest.client.async_client import AsyncClient
    from sidequest.errors import NotReplicatedError
    from sidequest.features.tasks import Task

    wait = 0.3  # each push frozen alone: well inside the node timeout, so no node is marked failing
    client = Client(Config(redis_url=url, wait_replicas=1, wait_timeout=wait))
    primary = cluster.node_of(CLUSTER.queue("q07"))
    replica = cluster.members[cluster.replica_of(primary)]
    task = Task.create("replicated", client=client, queue="q07")
    flow = sidequest.workflow("replicated").add("a", logged.s(1).set(queue="q07"))
    runner = asyncio.Runner()
    aio = AsyncClient(client=client)
    pushes = {"push": lambda: client.push(logged, [1], queue="q07"),
              "bulk": lambda: client.push_bulk(logged, [[1], [2]], queue="q07"),
              "unique": lambda: client.push(logged, [time.monotonic_ns()], queue="q07", unique_for=60),
              "asyncio": lambda: runner.run(aio.push(logged, [1], queue="q07")),
              "asyncio unique": lambda: runner.run(aio.push(logged, [time.monotonic_ns()], queue="q07", unique_for=60)),
              "Task.add": lambda: task.add(logged.set(queue="q07"), 1),
              "workflow": lambda: flow.perform_async(client=client)}
    admin = cluster.members[primary].client()
    try:
        for name, push in pushes.items():
            wait_until(lambda: admin.execute_command("WAIT", 1, 1000) == 1, STARTUP, 0.05, "the replica in sync")
            replica.proc.send_signal(signal.SIGSTOP)
            try:
                began = time.monotonic()
                with pytest.raises(NotReplicatedError, match="0 of the 1 replica"):
                    push()
                took = time.monotonic() - began
            finally:
                replica.proc.send_signal(signal.SIGCONT)
            assert wait * 0.8 <= took < wait + 5, f"{name}: raised after {took:.2f} s"
            warm_up(push)  # and confirmed once the replica answers
    finally:
        runner.run(aio.aclose())
        runner.close()
        admin.close()
        cluster.wait_settled()


def test_debounce_and_throttle_settle_in_their_queues_slot_and_run_once(url, rc):
    """Issue 31 item 3 on a Cluster: a debounced job's record and counts live beside its
    queue's `schedule:{q}`, so the push is one script call in one slot; the run happens once."""
    from sidequest.api import flow_counts

    @sidequest.job(name="ClusterDebounced", debounce=0.5, key=lambda n: "one")
    def debounced(n: int) -> None:
        _note(f"debounced:{n}")

    @sidequest.job(name="ClusterThrottled", throttle=60)
    def throttled(n: int) -> None:
        _note(f"throttled:{n}")

    config = Config(redis_url=url, queues=["q04", "q33"], concurrency=2, **FAST)
    client = Client(config)
    for n in range(20):
        assert client.push(debounced, [n], queue="q04") is not None
    assert [client.push(throttled, [1], queue="q33") is not None for _ in range(3)] == [True, False, False]
    assert rc.zcard(CLUSTER.schedule("q04")) == 1  # the 19 replaced runs are gone
    records = list(rc.scan_iter(match="sidequest:debounce:*", target_nodes="primaries"))
    assert [rc.keyslot(k) for k in records] == [rc.keyslot(CLUSTER.schedule("q04"))]
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: RAN["debounced:19"] == 1 and RAN["throttled:1"] == 1, STARTUP, 0.05, "both to run")
        wait_until(lambda: rc.zcard(CLUSTER.schedule("q04")) == 0 and rc.llen(CLUSTER.queue("q04")) == 0,
                   STARTUP, 0.05, "nothing pending")
    finally:
        launcher.stop()
    assert sorted(RAN) == ["debounced:19", "throttled:1"]
    counts = flow_counts(client)
    assert counts["ClusterDebounced"]["replaced"] == 19 and counts["ClusterThrottled"]["dropped"] == 2


def test_group_slots_whose_jobs_are_nowhere_come_back_on_three_primaries(url, rc):
    """Issue 38: a queue's running sets and reserved lists are in its slot, the processes and
    their work hashes in others, so reconciliation reads them one by one (never one script) and
    gives back in the queue's slot. One grouped queue per primary; on each, one job taken by
    hand (a Ruby worker) and one held by a process's work hash: only the first comes back."""
    from sidequest.jobs.payload import decode
    from sidequest.store.lanes import LaneKeys
    from sidequest.store.lanes.slots import SlotReconciler

    by_node: dict[str, str] = {}
    for name in QUEUES:
        by_node.setdefault(rc.get_node_from_key(CLUSTER.queue(name)).name, name)
    queues = sorted(by_node.values())
    assert len(queues) == 3
    client = Client(Config(redis_url=url))
    for queue in queues:
        for n in range(3):
            client.push("Echo", [n], queue=queue, group="g", group_concurrency=2)
    held = {}
    for queue in queues:
        gone, running = rc.rpop(CLUSTER.queue(queue)), rc.rpop(CLUSTER.queue(queue))
        held[queue] = (gone, running)
        identity = f"ruby-{queue}:1:abc"
        rc.sadd(keys.PROCESSES, identity)
        rc.hset(keys.work(identity), "tid", f'{{"queue":"{queue}","payload":{running.decode()},"run_at":1}}')
    now = [0.0]
    slots = SlotReconciler(rc, 5.0, clock=lambda: now[0])
    assert slots.run(queues) == 0
    now[0] = 5.0
    assert slots.run(queues) == 3
    for queue in queues:
        lane = LaneKeys(CLUSTER.lanes(queue))
        running_jid = decode(held[queue][1])["jid"]
        staged = decode(rc.lindex(CLUSTER.queue(queue), -1))["jid"]
        assert rc.smembers(lane.running("g")) == {running_jid.encode(), staged.encode()}  # the third staged


def test_groups_and_priorities_stage_in_their_queues_slot_and_run_fairly(url, rc):
    """Issue 31 items 1 and 2 on a Cluster: a queue's lanes are `sidequest:lanes:{q}...`, in its
    slot, so a laned push and each staging are one script call there. 100 jobs of group A then 5
    of group B: B's run before A's 50th (FIFO would run them after A's 100th); on another queue
    (another primary) a priority-8 job pushed after 20 of priority 2 starts first."""
    order: list[tuple[str, int]] = []

    @sidequest.job(name="ClusterTenant")
    def tenant(group: str, n: int) -> None:
        order.append((group, n))

    config = Config(redis_url=url, queues=["q04", "q21"], concurrency=1, **FAST)
    client = Client(config)
    client.push_bulk(tenant, [["A", n] for n in range(100)], queue="q04", group="A")
    client.push_bulk(tenant, [["B", n] for n in range(5)], queue="q04", group="B")
    client.push_bulk(tenant, [["low", n] for n in range(20)], queue="q21", priority=2)
    client.push(tenant, ["high", 0], queue="q21", priority=8)
    lanes = list(rc.scan_iter(match="sidequest:lanes:*", target_nodes="primaries"))
    assert lanes and {rc.keyslot(k) for k in lanes} == {rc.keyslot(CLUSTER.queue(q)) for q in ("q04", "q21")}
    launcher = Launcher(config)
    launcher.run()
    try:
        wait_until(lambda: len(order) == 126, STARTUP, 0.05, "every laned job to run")
        wait_until(lambda: not any(rc.llen(CLUSTER.queue(q)) for q in ("q04", "q21")), STARTUP, 0.05, "nothing left")
    finally:
        launcher.stop()
    a_done = [i for i, (group, _) in enumerate(order) if group == "A"]
    assert max(i for i, (group, _) in enumerate(order) if group == "B") < a_done[49]
    assert [n for group, n in order if group == "A"] == list(range(100))  # FIFO within the group
    assert next(group for group, _ in order if group in ("high", "low")) == "high"
    assert [n for group, n in order if group == "low"] == list(range(20))
    assert not rc.exists(CLUSTER.lanes("q04")) and not rc.exists(CLUSTER.lanes("q21"))  # no level waits
