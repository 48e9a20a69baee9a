"""The held-groups row's set-up (`sidequest_peer.py hold`, harness/groups.py): many groups on queue
`bench`, most of them past, some held back, so that one open group's jobs are measured among them.

A holder worker (`sidequest worker --runner asyncio`, BENCH_HOLDER=1, started by the harness) runs
on `bench` meanwhile. In order, each step waiting for the holder before the next:
  1. PAST groups of one no-op job each (`past-<i>`), run through: groups that were there and
     left what a group leaves behind;
  2. a third of HELD groups at their concurrency (`conc-<i>`, `group_concurrency=1`): two
     `BenchHold` jobs each, the first running in the holder for the rest of the row (an
     `asyncio.sleep`), the second waiting; 32 groups a push (a job's end stages the next ones,
     and these never end: else the poller's pass alone would, 32 jobs each);
  3. a third out of their rate (`rate-<i>`, `group_rate=(1, 3600)`): two no-op jobs each, the
     first run by the holder, the second waiting for the next hour;
  4. the holder made quiet (it takes no more jobs; its `BenchHold` jobs keep their slots), then
     the rest paused (`paused-<i>`, `pause_group`) and given two no-op jobs each; their push
     leaves them in the turns, so staging calls (`resume_group` of a group without jobs) set them
     aside before the measured phase rather than during it.
Then `queue:bench` is empty and every held group has waiting jobs; the no-op count starts again at 0.
Pushed by wire name (`BenchNoop`, `BenchHold`), so that this module needs no job of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import _peer

import sidequest
from sidequest.api import ProcessSet, Queue, pause_group, resume_group

HOLD = "BenchHold"
HOLDING = "bench:holding"  # BenchHold jobs running in the holder
CHUNK = 10_000
STAGED = 32  # jobs a push stages at most into an empty queue (lanes.LANE_DEPTH)
TURNS = 64  # turns a staging call takes beyond the jobs it stages (lanes.TURN_SLACK)
DEADLINE = 600.0  # s for one step (a baseline that stages slowly among held groups takes long)


def hold(url: str, past: int, held: int) -> dict[str, Any]:
    client = sidequest.configure(sidequest.Config(redis_url=url))
    r = _peer.connect(url)
    began = time.perf_counter()
    conc = rate = held // 3
    paused = held - conc - rate
    push(client, "BenchNoop", [[f"past-{i}"] for i in range(past)])
    wait_for(lambda: int(r.get(_peer.COUNT) or 0) >= past, f"the holder to run the {past:,} past groups' jobs")
    for start in range(0, conc, STAGED):  # a running BenchHold never ends: nothing but a push stages more
        push(client, HOLD, [[f"conc-{i}"] for i in range(start, min(start + STAGED, conc)) for _ in range(2)],
             group_concurrency=1)
        upto = min(start + STAGED, conc)
        wait_for(lambda upto=upto: int(r.get(HOLDING) or 0) >= upto, "the holder to take a slot's job")
    push(client, "BenchNoop", [[f"rate-{i}"] for i in range(rate) for _ in range(2)], group_rate=(1, 3600))
    wait_for(lambda: int(r.get(_peer.COUNT) or 0) >= past + rate, f"{rate:,} groups to use their rate")
    for process in ProcessSet(client):
        process.quiet()
    wait_for(lambda: all(p.stopping for p in ProcessSet(client)), "the holder to be quiet")
    for i in range(paused):
        pause_group(_peer.QUEUE, f"paused-{i}", client)
    push(client, "BenchNoop", [[f"paused-{i}"] for i in range(paused) for _ in range(2)])
    for _ in range(paused // TURNS + 2):  # a push leaves them in the turns: a staging call sets TURNS aside
        resume_group(_peer.QUEUE, "past-0", client)  # a group with no job: only the staging call it makes
    waiting = Queue(_peer.QUEUE, client).size
    if waiting:
        raise SystemExit(f"hold: {waiting} job(s) staged into queue:bench, none expected")
    r.delete(_peer.COUNT, _peer.FIRST, _peer.LAST)
    return {"past": past, "concurrency": conc, "rate": rate, "paused": paused,
            "seconds": time.perf_counter() - began}


def push(client: sidequest.Client, name: str, args: list[list[Any]], **options: Any) -> None:
    """Each job in the group its first argument names, CHUNK jobs a call."""
    for start in range(0, len(args), CHUNK):
        client.push_bulk(name, args[start:start + CHUNK], queue=_peer.QUEUE, group=group_of, **options)


def group_of(name: str) -> str:
    return name


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"hold: gave up waiting for {what} after {DEADLINE:.0f} s")
        time.sleep(0.05)
