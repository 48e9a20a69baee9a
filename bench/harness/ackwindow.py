"""The acknowledgement window (sidequest rows): how long a job that has finished stays in Redis
before it is acknowledged, i.e. what a `kill -9` of the worker at that moment would run again.

The worker, idle after the other phases, gets a seeded stream of `BenchAckProbe(i, seconds)` jobs
(bench/peers/sidequest_peer.py): bursts of 1 to BURST_MAX jobs at random gaps (GAP_MEAN on
average), each job sleeping 0 s or 50 ms, so the process sees busy moments (batches, processors
waiting on another's fetch) and quiet ones (every processor blocked on the empty queue). A job's
last act records when its body ended (HSET bench:ack:ends <i> <time>). Meanwhile a sampler thread
reads, in one Lua call, Redis's clock and every list named in `sidequest:reservations` (the
process's batch list and each processor's own list; in Cluster mode the index of queue `bench`,
`sidequest:reservations:{bench}`, whose lists share its slot), about every `interval` seconds.

A job's figure is the time from its end to the first snapshot after its end that no longer holds
it: an upper bound, above the true moment by at most one gap between snapshots (reported as the
resolution). A job still held LINGER_CAP s after the last end counts with the time until then.
The same seed (the round number) gives every row of a round the same stream."""

from __future__ import annotations

import bisect
import itertools
import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

from sidequest.store.keys import DEFAULT, QUEUES, Keyspace

from .peers import PhaseError
from .tree import Tree

PROBE = "BenchAckProbe"
ENDS = "bench:ack:ends"  # written by the probe job (sidequest_peer.ACK_ENDS)
QUEUE = "bench"
BURST_MAX = 12
GAP_MEAN = 0.05  # s between bursts, exponentially distributed
SLOW = 0.05  # s that half of the jobs sleep
LINGER_CAP = 5.0  # s after the last end: what is still held then counts as held until then

# Reads only; the lists it reads are named in the set, not declared (on a Cluster: in the set's slot).
SNAPSHOT = """
local now = redis.call('TIME')
local out = {now[1], now[2]}
for _, key in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  for _, raw in ipairs(redis.call('LRANGE', key, 0, -1)) do
    out[#out + 1] = key
    out[#out + 1] = raw
  end
end
return out
"""

Snapshot = tuple[float, dict[int, bool]]  # Redis time; probe number -> held in the batch list


@dataclass(frozen=True)
class Stay:
    """One job, after its end: how long it stayed in Redis (seconds, an upper bound, see module)."""

    job: int
    seconds: float
    held_after_end: bool  # a snapshot after its end still held it
    acknowledged: bool  # a snapshot after its end no longer held it
    batch: bool  # it was seen in the process's batch list (reliable fetch's batches)


def stream(count: int, seed: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """(offset in s from the start, [(job number, seconds it sleeps), ...]) per burst."""
    rng = random.Random(seed)
    bursts, at, i = [], 0.0, 0
    while i < count:
        size = min(rng.randint(1, BURST_MAX), count - i)
        bursts.append((at, [(i + k, SLOW if rng.random() < 0.5 else 0.0) for k in range(size)]))
        i += size
        at += rng.expovariate(1 / GAP_MEAN)
    return bursts


def payload(job: int, seconds: float, rng: random.Random) -> str:
    now = time.time()
    return json.dumps({"class": PROBE, "args": [job, seconds], "queue": QUEUE, "jid": f"{rng.getrandbits(96):024x}",
                       "retry": True, "created_at": now, "enqueued_at": now})


class Sampler:
    """A thread taking snapshots (raw replies, parsed later) until stopped."""

    def __init__(self, r: redis.Redis, reservations: str, interval: float) -> None:
        self.r = r
        self.reservations = reservations
        self.interval = interval
        self.script = r.register_script(SNAPSHOT)
        self.replies: list[list[bytes]] = []
        self.holds = True  # the last snapshot held something
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ack-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                reply = self.script(keys=[self.reservations])
                self.replies.append(reply)
                self.holds = len(reply) > 2
                time.sleep(self.interval)
        except BaseException as exc:  # reported by the phase
            self.error = exc

    def snapshots(self) -> list[Snapshot]:
        ids: dict[bytes, int | None] = {}
        found = []
        for reply in self.replies:
            held: dict[int, bool] = {}
            for k in range(2, len(reply), 2):
                raw = reply[k + 1]
                if raw not in ids:
                    ids[raw] = probe_number(raw)
                job = ids[raw]
                if job is not None:
                    held[job] = held.get(job, False) or reply[k].endswith(b":batch")
            found.append((int(reply[0]) + int(reply[1]) / 1e6, held))
        return found


def probe_number(raw: bytes) -> int | None:
    try:
        job = json.loads(raw)
        return int(job["args"][0]) if job.get("class") == PROBE else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def stays(snapshots: list[Snapshot], ends: dict[int, float]) -> list[Stay]:
    """Each ended job's stay after its end (see module), from snapshots in time order."""
    times = [t for t, _ in snapshots]
    batch = {job for _, held in snapshots for job, in_batch in held.items() if in_batch}
    found = []
    for job, end in sorted(ends.items()):
        held, gone = False, None
        for t, present in snapshots[bisect.bisect_right(times, end):]:
            if job not in present:
                gone = t
                break
            held = True
        last = gone if gone is not None else (times[-1] if times else end)
        found.append(Stay(job, max(0.0, last - end), held, gone is not None, job in batch))
    return found


def measure(r: redis.Redis, tree: Tree, count: int, interval: float, seed: int,
            space: Keyspace = DEFAULT) -> dict[str, Any]:
    """Run the stream through the idle worker (sidequest's keys laid out as `space`); its stays
    and the gaps between snapshots (s)."""
    rng = random.Random(seed)
    bursts = stream(count, seed)
    r.delete(ENDS)
    with Sampler(r, space.reservations(QUEUE), interval) as sampler:
        began = time.monotonic()
        for at, jobs in bursts:
            wait = began + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            pipe = r.pipeline(transaction=False)  # a Cluster's `queues` and queue are in two slots
            pipe.sadd(QUEUES, QUEUE)
            pipe.lpush(space.queue(QUEUE), *(payload(job, seconds, rng) for job, seconds in jobs))
            pipe.execute()
        deadline = time.monotonic() + 60
        while r.hlen(ENDS) < count:
            tree.check_alive("while the probe jobs ran")
            if time.monotonic() > deadline or sampler.error:
                raise PhaseError(f"only {r.hlen(ENDS)} of {count} probe jobs ended within 60 s of the last push"
                                 f"{f' (sampler: {sampler.error})' if sampler.error else ''}")
            time.sleep(0.05)
        cap = time.monotonic() + LINGER_CAP
        while sampler.holds and time.monotonic() < cap and not sampler.error:
            time.sleep(0.01)
        time.sleep(0.01)  # a few snapshots past the last acknowledgement
    if sampler.error:
        raise PhaseError(f"the sampler failed: {type(sampler.error).__name__}: {sampler.error}")
    ends = {int(job): float(t) for job, t in r.hgetall(ENDS).items()}
    r.delete(ENDS)
    snapshots = sampler.snapshots()
    times = [t for t, _ in snapshots]
    return {"stays": stays(snapshots, ends), "gaps": [b - a for a, b in itertools.pairwise(times)],
            "seconds": time.monotonic() - began}
