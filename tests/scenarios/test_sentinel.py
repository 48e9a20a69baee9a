"""Redis Sentinel: the URL form, and workers and producers that follow a failover by themselves.

The topology is real (tests/topology.py): a primary, a replica and three Sentinels on loopback
ports. What jobs ran is written to a file, not to Redis, so a count survives what a failover
loses. `wait_replicas` pushes must all run: 0 lost; a job may run twice (at least once).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import Counter

import pytest
import redis
from conftest import PYTHON, ROOT, STARTUP, python_env, redis_server_binary, wait_until
from jobs_for_tests import logged
from topology import SentinelSet, failover_under_load

import sidequest
from scenarios.test_reliability import worker_factory
from sidequest import Client, Config
from sidequest.api import Queue
from sidequest.client.async_client import AsyncClient
from sidequest.errors import JobArgumentError, NotReplicatedError, RedisURLError
from sidequest.store.connection import connect, mask_url
from sidequest.store.urls import parse_sentinel_url


@pytest.fixture
def sentinels():
    with SentinelSet(redis_server_binary()) as topology:
        yield topology


@pytest.fixture
def procs(tmp_path):
    """Workers on a URL of the test's choosing: `procs(url, *args)`."""
    factory = worker_factory("", tmp_path)
    start = next(factory)
    yield lambda url, *args, **kw: start(*args, url=url, **kw)
    factory.close()


# -- the URL -------------------------------------------------------------------------------------

def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database():
    url = parse_sentinel_url("redis+sentinel://app:s%40cret@s1:26379,s2,[::1]:26380/mymaster/3")
    assert url.sentinels == (("s1", 26379), ("s2", 26379), ("::1", 26380))
    assert (url.service, url.db, url.username, url.password, url.tls) == ("mymaster", 3, "app", "s@cret", False)
    tls = parse_sentinel_url("rediss+sentinel://:pw@s1:26379/cache?sentinel_password=other")
    assert (tls.tls, tls.db, tls.password, tls.sentinel_password) == (True, 0, "pw", "other")
    assert mask_url("redis+sentinel://app:secret@s1:26379,s2:26379/mymaster/0?sentinel_password=x") == \
        "redis+sentinel://app:****@s1:26379,s2:26379/mymaster/0?sentinel_password=****"


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://s1:26379", "names no service"),
    ("redis+sentinel://s1:26379/mymaster/abc", "whole-number db"),
    ("redis+sentinel://s1:port/mymaster", "not a Sentinel's host:port"),
    ("redis+sentinel://s1:26379,,s2/mymaster", "not a Sentinel's host:port"),
    ("redis+sentinel://s1:26379/mymaster?sentinel_pasword=x", "unknown option 'sentinel_pasword'"),
])
def test_a_malformed_sentinel_url_is_one_line_naming_the_fault_and_the_form(url, says):
    with pytest.raises(RedisURLError) as caught:
        connect(url)
    message = str(caught.value)
    assert says in message and "redis+sentinel://" in message and "\n" not in message


def test_sentinels_that_do_not_answer_are_one_clear_error():
    with pytest.raises(sidequest.errors.RedisUnavailableError, match="cannot reach Redis at redis\\+sentinel://"):
        connect("redis+sentinel://127.0.0.1:1/mymaster/0")


def test_the_cli_refuses_a_malformed_sentinel_url_in_one_line():
    done = subprocess.run([PYTHON, "-m", "sidequest.cli", "stats", "--redis-url", "redis+sentinel://s1:26379"],
                          env=python_env(), capture_output=True, text=True, timeout=STARTUP)
    assert done.returncode != 0
    assert "names no service" in done.stderr and "Traceback" not in done.stderr + done.stdout


# -- wait_replicas --------------------------------------------------------------------------------

def test_wait_replicas_is_a_checked_option_and_not_a_payload_field(r, redis_url):
    with pytest.raises(JobArgumentError, match="wait_replicas"):
        logged.set(wait_replicas=-1)
    with pytest.raises(JobArgumentError, match="wait_timeout"):
        logged.set(wait_timeout=0)
    client = Client(Config(redis_url=redis_url))
    client.push(logged, [1], wait_replicas=0)
    assert b"wait_replicas" not in r.lindex("queue:default", 0)


def test_a_push_no_replica_confirms_raises_with_its_jids_and_stays_on_the_primary(r, redis_url):
    client = Client(Config(redis_url=redis_url, wait_replicas=1, wait_timeout=0.05))
    with pytest.raises(NotReplicatedError) as caught:
        client.push_bulk(logged, [[1], [2]])
    assert caught.value.replicas == 0 and len(caught.value.jids) == 2
    assert "0 of the 1 replica(s)" in str(caught.value)
    assert r.llen("queue:default") == 2  # written on the primary: only not confirmed
    # a job's own option overrides the configuration, both ways
    assert client.push(logged, [3], wait_replicas=0) is not None
    quick = Client(Config(redis_url=redis_url))
    with pytest.raises(NotReplicatedError):
        logged.set(wait_replicas=1, wait_timeout=0.05, client=quick).perform_async(4)


def test_wait_replicas_returns_once_the_replica_holds_every_kind_of_push(sentinels):
    url = sentinels.url()
    client = Client(Config(redis_url=url, wait_replicas=1, wait_timeout=5))
    assert client.push(logged, [1]) is not None
    assert client.push(logged, [2], in_=60) is not None
    assert client.push(logged, [3], unique_for=60) is not None
    assert len(client.push_bulk(logged, [[4], [5]])) == 2
    task = sidequest.Task.create("replicated", client=client)
    task.add(logged, 6)
    replica = redis.Redis("127.0.0.1", sentinels.replica.port)
    # WAIT returned 1: the replica holds each of them already, no waiting here
    assert replica.llen("queue:default") == 5 and replica.zcard("schedule") == 1

    async def pushed_async() -> int:
        async with AsyncClient(Config(redis_url=url, wait_replicas=1, wait_timeout=5)) as aio:
            await aio.push(logged, [7])
            await aio.push(logged, [8], unique_for=60)
            return int(await (await aio.connection()).llen("queue:default"))
    assert asyncio.run(pushed_async()) == 7
    assert replica.llen("queue:default") == 7


# -- failover -------------------------------------------------------------------------------------

def test_clients_of_every_kind_follow_a_failover(sentinels):
    url = sentinels.url()
    client = Client(Config(redis_url=url))
    client.push(logged, [1])
    direct = client.direct  # what sidequest.redis() gives jobs
    direct.set("before", 1)
    sentinels.kill_primary()
    sentinels.wait_promoted()

    def pushed() -> bool:
        try:
            client.push(logged, [2])
            direct.set("after", 1)
            return True
        except (redis.ConnectionError, redis.TimeoutError):
            return False
    wait_until(pushed, STARTUP, 0.1, "the client to push to the new primary")
    primary = redis.Redis("127.0.0.1", sentinels.replica.port)
    assert primary.get("after") == b"1"
    assert primary.llen("queue:default") >= 1

    async def via_aio() -> str | None:
        async with AsyncClient(Config(redis_url=url)) as aio:
            return await aio.push(logged, [3])
    assert asyncio.run(via_aio()) is not None
    done = subprocess.run([PYTHON, "-m", "sidequest.cli", "queues", "--json", "--redis-url", url],
                          env=python_env(), capture_output=True, text=True, timeout=STARTUP)
    assert done.returncode == 0, done.stderr
    assert '"default"' in done.stdout
    health = subprocess.run([PYTHON, "-m", "sidequest.cli", "health", "--readiness"],
                            env=python_env(REDIS_URL=url), capture_output=True, text=True, timeout=STARTUP)
    assert health.returncode == 0, health.stdout + health.stderr
    assert "accepts writes" in health.stdout and "secret" not in health.stdout
    assert Queue("default", client=client).size >= 2  # the admin API reads the new primary


@pytest.mark.parametrize("replicas", [1, 0])
def test_a_worker_and_a_producer_on_a_sentinel_url_keep_working_through_a_sigkill_of_the_primary(
        sentinels, tmp_path, capsys, replicas):
    """With wait_replicas=1 every confirmed push runs (0 lost); without it, what the primary had
    confirmed but not yet replicated when it died is lost, and the test reports how many."""
    run = failover_under_load(sentinels, replicas, tmp_path)
    with capsys.disabled():
        print(f"\nsentinel failover, {run.summary()}")
    if replicas:
        assert run.lost == set()
    assert set(run.ran) <= run.confirmed | run.unconfirmed  # nothing ran that was never pushed
    assert run.worker_exit == 0, run.worker_output
    assert "Traceback" not in run.worker_output
    # an outage is one line each way in each worker process, however many of its threads saw it,
    # and the failures just after Redis answered again are the same outage: the connections made
    # before the switch fail one by one, and the Sentinels close the promoted replica's clients.
    # A second failover is a second outage. Once (CI, 2026-12-07, a 2-core machine under two
    # suites) all of a process's connections were closed at once 12 s after the first, and it
    # answered again 0.1 s later: the signature of a demotion's CLIENT KILL, as when the new
    # primary misses the Sentinels' PINGs for `down-after-milliseconds` (1 s here); not reproduced
    # since, so only the Sentinels' own count of failovers allows a second one
    failovers = sentinels.failovers()
    down, up = Counter[str](), Counter[str]()
    for line in run.worker_output.splitlines():
        pid = re.search(r"pid=(\d+)", line)
        if pid and "Redis is unavailable" in line:
            down[pid.group(1)] += 1
        elif pid and "Redis answers again" in line:
            up[pid.group(1)] += 1
    assert down and set(down.values()) <= set(range(1, failovers + 1)), (failovers, run.worker_output)
    assert up == down, run.worker_output


def test_the_durability_snippet_of_the_deployment_docs_runs_as_written(sentinels, monkeypatch):
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text[text.index("### Durability"):]
    start = section.index("```python") + len("```python")
    snippet = section[start:section.index("```", start)]
    monkeypatch.setenv("REDIS_URL", sentinels.url())
    previous = sidequest.client.sync_client._default
    try:
        exec(compile(snippet, "deployment.md", "exec"), {"__name__": "deployment_docs"})
    finally:
        sidequest.client.sync_client._default = previous
    replica = redis.Redis("127.0.0.1", sentinels.replica.port)
    assert replica.llen("queue:default") == 1  # WAIT returned: the replica holds it already
