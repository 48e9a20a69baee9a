"""The client's seam (`client/plugins.py`): the features' parts of a push and of the asyncio
client's reads are found there, registered by `features/registry.py` when sidequest is imported,
so a client used alone still claims, records and reads; a part registered by anyone else takes
part in the push the same way, on the sync and the asyncio client."""

import asyncio
import json
import subprocess
import sys

import pytest

import sidequest
from sidequest.client import plugins
from sidequest.client.async_client import AsyncClient
from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.store import keys

FRESH = """
import asyncio, json, sys
from sidequest.client import Client
from sidequest.aio import AsyncClient
from sidequest.config import Config

url = sys.argv[1]
sync = Client(Config(redis_url=url))
pushes = [sync.push("Refresh", [7], unique_for=60), sync.push("Refresh", [7], unique_for=60)]

async def main():
    async with AsyncClient(Config(redis_url=url)) as client:
        jids = [await client.push("Refresh", [8], unique_for=60), await client.push("Refresh", [8], unique_for=60)]
        kept = await client.push("Report", [1], result_ttl=60)
        return jids, await client.status(kept)

jids, state = asyncio.run(main())
print(json.dumps({"sync": pushes, "aio": jids, "state": state}))
"""


def test_a_client_imported_alone_claims_a_unique_job_and_reads_its_status(redis_url, r):
    """A fresh interpreter that imports only `sidequest.client` and `sidequest.aio` (never
    `sidequest.features`) gets the claim on both clients and the asyncio status read."""
    out = subprocess.run([sys.executable, "-c", FRESH, redis_url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["sync"][0] is not None and seen["sync"][1] is None
    assert seen["aio"][0] is not None and seen["aio"][1] is None
    assert seen["state"] == "queued"
    assert r.llen(keys.queue("default")) == 3  # two unique jobs, one with a record: nothing else


def _mark(name, payload, queue, final):
    """Client middleware that gives every payload a `test_hold` field (the seam's trigger)."""
    payload["test_hold"] = payload["args"][0]
    return final()


def _hold(payload, when, now, space):
    return space.unique(f"test-hold-{payload['test_hold']}", str(payload["queue"])), 60_000


@pytest.fixture
def held():
    """A part registered by a test (as an integration would): the field `test_hold` claims."""
    plugins.register(plugins.ClientPlugin("test_hold", field="test_hold", claim=_hold))
    yield
    plugins.unregister("test_hold")


def test_a_part_registered_in_the_seam_claims_on_both_clients(held, redis_url, r):
    chain = sidequest.Chain()
    chain.add(_mark)
    config = Config(redis_url=redis_url, client_middleware=chain)
    client = Client(config)
    assert client.push("Job", ["a"]) is not None
    assert client.push("Job", ["a"]) is None  # the registered claim holds it
    assert client.push("Job", ["b"]) is not None

    async def pushes():
        async with AsyncClient(client=client) as aio:
            return [await aio.push("Job", ["a"]), await aio.push("Job", ["c"])]

    assert asyncio.run(pushes())[0] is None
    assert r.llen(keys.queue("default")) == 3
    plugins.unregister("test_hold")
    assert client.push("Job", ["a"]) is not None  # out of the seam: no claim asked


def test_without_a_registered_reader_the_asyncio_status_says_how_to_get_one(redis_url):
    saved = plugins.registered()
    plugins.unregister("status")
    try:
        async def look():
            async with AsyncClient(Config(redis_url=redis_url)) as client:
                return await client.status("0" * 24)

        with pytest.raises(RuntimeError, match="no feature answers status; `import sidequest` registers them"):
            asyncio.run(look())
    finally:
        for plugin in saved:  # back in their order
            plugins.unregister(plugin.name)
        plugins.register(*saved)
    assert plugins.registered() == saved
