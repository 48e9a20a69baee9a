"""The push's one call (`client/push_script.py`, sent by `push_plan`), counted on a server of the
test's own (INFO commandstats): each kind of push is one MULTI or one script call, the sync and
the asyncio client send the same commands, and a bulk push over many groups looks at each key's
type once per call (not five times a group), still refusing a key set by hand in one line with
nothing written."""

import asyncio

import pytest
import redis
from redis.exceptions import ResponseError

from sidequest.client.async_client import AsyncClient
from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.store import keys, lanes

KINDS = {  # a push of each kind, and the commands it costs on the server
    "plain": ({}, {"multi": 1, "sadd": 1, "lpush": 1, "exec": 1}),
    "result_ttl": ({"result_ttl": 60}, {"multi": 1, "sadd": 1, "lpush": 1, "hset": 1, "pexpire": 1, "exec": 1}),
    "unique": ({"unique_for": 60}, {"evalsha": 1, "set": 1, "sadd": 1, "lpush": 1}),
    "throttle": ({"throttle": 60}, {"evalsha": 1, "set": 1, "sadd": 1, "lpush": 1}),
    "debounce": ({"debounce": 60}, {"evalsha": 1, "get": 1, "set": 1, "zadd": 1}),
}


def commands(r: redis.Redis) -> dict[str, int]:
    counted = {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in r.info("commandstats").items()}
    ours = ("info", "config", "config|resetstat", "script", "script|load")  # Redis 6.2 counts no subcommands
    return {name: n for name, n in counted.items() if name not in ours}


@pytest.fixture
def server(private_redis):
    url = private_redis.url(0)
    r = redis.Redis.from_url(url)
    yield url, r
    r.close()


@pytest.mark.parametrize("kind", KINDS)
def test_each_push_is_one_call_and_both_clients_send_the_same_commands(server, kind):
    url, r = server
    options, expected = KINDS[kind]
    sync = Client(Config(redis_url=url))
    sync.push("Warm", [0], unique_for=1)  # the script loaded, the connections made
    sync.push("Warm", [0])
    r.flushdb()
    r.config_resetstat()
    assert sync.push("Job", [kind], **options) is not None
    by_sync = commands(r)

    async def push():
        async with AsyncClient(Config(redis_url=url)) as client:
            await client.push("Warm", [0], unique_for=1)  # its connections made, for a script and a MULTI
            await client.push("Warm", [0])
            r.flushdb()
            r.config_resetstat()
            return await client.push("Job", [kind], **options)

    assert asyncio.run(push()) is not None
    assert by_sync == expected
    assert commands(r) == expected


def grouped(client: Client, count: int, groups: int) -> list[str | None]:
    return client.push_bulk("Tenant", [[n] for n in range(count)], group=lambda n: f"t{n % groups}")


def test_a_bulk_push_over_1000_groups_looks_at_each_keys_type_once(server):
    """5,000 jobs in 1,000 groups: one TYPE per group's lane (plus the queue's and the level's
    keys once, and the staging's own look), where each group's five were looked at before; and
    the queue's name added to `queues` once, not once a job."""
    url, r = server
    client = Client(Config(redis_url=url))
    grouped(client, 10, 10)  # the script loaded
    r.flushdb()
    r.config_resetstat()
    assert None not in grouped(client, 5000, 1000)
    counted = commands(r)
    assert counted["evalsha"] == 1
    assert 1000 <= counted["type"] <= 1000 + 20  # was 5,010
    assert counted["sadd"] <= 1 + 1000 + 100  # `queues` once, each level's and group's first job, staging's
    base = keys.DEFAULT.lanes("default")
    assert r.hlen(lanes.LaneKeys(base).waiting) + r.llen(keys.queue("default")) >= 1000  # every group is in


@pytest.mark.parametrize("spoiled", ["lane", "rotation", "waiting"])
def test_a_lane_key_set_by_hand_refuses_the_whole_bulk_in_one_line(server, spoiled):
    """Checked once per key, a key of another type is still found before the first write: the
    500th group's lane, the level's rotation or the queue's waiting counts."""
    url, r = server
    client = Client(Config(redis_url=url))
    lane = lanes.LaneKeys(keys.DEFAULT.lanes("default"))
    key = {"lane": lane.lane(lanes.DEFAULT_LEVEL, "t499"), "rotation": lane.rotation(lanes.DEFAULT_LEVEL),
           "waiting": lane.waiting}[spoiled]
    r.set(key, "by hand")
    with pytest.raises(ResponseError) as caught:
        grouped(client, 5000, 1000)
    message = str(caught.value)
    assert message == f"a key of the lanes {lane.base} is of another type (set by hand?): nothing pushed"
    assert r.keys("*") == [key.encode()]  # nothing else written
