"""The periodic scheduler: a thread in every worker process that enqueues due ticks.

There is no leader to elect or lose. Every process computes the same ticks from the same
entries and races for each: the claim is one Lua call per tick (`PERIODIC_CLAIM`, below)
that pushes the job only if the tick is newer than the entry's `last` in Redis, and moves
`last` in the same call, so one process wins each tick and the others are refused, however
many processes and hosts run. The payload is a normal one, built by `Client.build` (client
middleware included), plus `periodic` (the entry id) and `periodic_at` (the tick, epoch seconds).

Timing: the thread sleeps until the earliest next tick of its entries, but never longer than
`WAKE` (1 s) so a stop or a newly registered entry is noticed, and wakes on the tick itself:
a tick is enqueued a few milliseconds after its time, not a poll interval later.

Missed ticks: a tick still unclaimed `MISSED_AFTER` seconds after its time was missed (every
worker was down, or Redis was). However many were missed, the newest of them is enqueued once
(`missed="enqueue"`, the default) or passed over (`missed="skip"`); later ticks run as usual.
An entry never seen before starts from its next tick.

Entries removed from the code: each scheduler describes the entries it runs every
`DESCRIBE_EVERY` seconds (or a quarter of `ttl`, if that is shorter), and each description sets
the entry's record and the set of ids to expire `ttl` seconds later (`periodic_ttl`, 7 days by
default). So a running entry's record never expires, and one that no scheduler runs any more
disappears, with its last run, once `ttl` has passed; two deploys running different code at once
each keep their own entries alive. A scheduler starting up also gives a TTL to records written
before records had one, and drops from the set the ids whose record has expired.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, cast

from sidequest.client.sync_client import Client
from sidequest.features.periodic.entries import Entry
from sidequest.jobs.options import merge_options
from sidequest.jobs.payload import in_millis, stamp
from sidequest.store import keys
from sidequest.store.connection import OUTAGE_ERRORS
from sidequest.worker.background.loop import Background

log = logging.getLogger(__name__)

WAKE = 1.0  # longest sleep, so stops and new entries are noticed
MISSED_AFTER = 5.0  # a tick unclaimed this long after its time was missed
DESCRIBE_EVERY = 30.0  # how often entry descriptions (and `seen`, and their TTLs) are refreshed in Redis
TTL = 7 * 24 * 3600.0  # an entry no scheduler describes any more is forgotten after this (`periodic_ttl`)
MAX_CATCH_UP = 100  # most recent ticks claimed in one pass (a 1 s entry after a 5 s stall: 5)
EARLY = 0.002  # sleep this much past a tick: a timed wait may return a hair early

# KEYS: sidequest:periodic:<entry id> (in Cluster mode its claim, `keys.Keyspace.periodic_claim`), queue:<q>,
#       queues (not in Cluster mode: the scheduler adds the name apart, and writes the last run to
#       the entry's record after the call)
# ARGV: tick (epoch seconds), job to enqueue ('' passes the tick without a job), queue name, jid, now,
# ttl (seconds the entry's record is kept: it may be created here, if it expired or was forgotten)
# Claim one tick of a periodic entry: only a tick newer than the entry's `last`
# (the newest tick handled) is taken, so among any number of schedulers exactly one pushes it.
# 1: this call pushed the job; 2: it passed the tick without one; 0: the tick was handled already.
PERIODIC_CLAIM = """
local last = redis.call('hget', KEYS[1], 'last')
if last and tonumber(last) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('hset', KEYS[1], 'last', ARGV[1])
redis.call('expire', KEYS[1], ARGV[6])
if ARGV[2] == '' then
  return 2
end
redis.call('hset', KEYS[1], 'last_run', ARGV[1], 'last_jid', ARGV[4], 'last_enqueued_at', ARGV[5])
if KEYS[3] then redis.call('sadd', KEYS[3], ARGV[3]) end
redis.call('lpush', KEYS[2], ARGV[2])
return 1
"""


def plan(entry: Entry, last: float | None, now: float, missed_after: float = MISSED_AFTER) -> list[tuple[int, bool]]:
    """The ticks to claim for `entry` at `now`, oldest first, each with whether to enqueue it.

    `last` is the newest tick handled (None: the entry is new, so the newest past tick is
    passed and it starts from the next one). Ticks older than `missed_after` and newer than
    `last` collapse into their newest, enqueued once or skipped per `entry.missed`.
    """
    schedule = entry.schedule
    if last is None:
        return [(int(schedule.latest_at(now)), False)]
    ticks: list[tuple[int, bool]] = []
    stale = schedule.latest_at(now - missed_after)
    if stale > last:
        ticks.append((int(stale), entry.missed == "enqueue"))
        last = stale
    tick = schedule.next_after(max(last, now - missed_after))
    while tick <= now and len(ticks) < MAX_CATCH_UP:
        ticks.append((int(tick), True))
        tick = schedule.next_after(tick)
    return ticks


class PeriodicScheduler:
    """Runs the entries that `entries()` returns (read again on every pass): start(), stop()."""

    def __init__(self, client: Client, entries: Callable[[], list[Entry]],
                 clock: Callable[[], float] = time.time, missed_after: float = MISSED_AFTER,
                 ttl: float = TTL) -> None:
        self.client = client
        self.redis = client.redis
        self.entries = entries
        self.clock = clock
        self.missed_after = missed_after
        self.ttl = max(1, math.ceil(ttl))  # whole seconds, for EXPIRE
        self.describe_every = min(DESCRIBE_EVERY, ttl / 4)  # a live entry's record never expires
        self._adopted = False  # once per scheduler: older records without a TTL get one (see _adopt)
        self._claim = self.redis.register_script(PERIODIC_CLAIM)
        self._next: dict[str, float] = {}  # entry id -> its next tick (absent: check it now)
        self._described: dict[str, float] = {}  # entry id -> when its description was written
        # after an outage every entry is checked again (`_next` forgotten)
        self.background = Background("sidequest-periodic", self._pass, what="periodic scheduler", retry=WAKE,
                                     on_outage=self._next.clear)

    def start(self) -> None:
        self.background.start()

    def stop(self) -> None:
        self.background.stop()

    def _pass(self) -> float:
        self.run_due()
        return self.next_wait()

    def run_due(self, now: float | None = None) -> int:
        """Claim every tick due at `now` (default: the clock); return how many this process enqueued."""
        now = self.clock() if now is None else now
        entries = self.entries()
        known = {e.id for e in entries}
        for gone in [i for i in self._next if i not in known]:  # an entry removed from the registry
            del self._next[gone]
        due = [e for e in entries if self._next.get(e.id, -math.inf) <= now]
        self._describe(entries, now)
        if not due:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for entry in due:
            pipe.hget(self.client.keys.periodic_claim(entry.id, entry.queue), "last")
        lasts: list[Any] = pipe.execute()
        enqueued = 0
        for entry, last in zip(due, lasts, strict=True):
            try:
                for tick, enqueue in plan(entry, None if last is None else float(last), now, self.missed_after):
                    enqueued += self._claim_tick(entry, tick, enqueue, now)
            except OUTAGE_ERRORS:
                raise
            except Exception:  # one broken entry (a payload over the size limit...) spares the others
                log.exception("periodic %s: could not enqueue", entry.id)
            self._next[entry.id] = entry.schedule.next_after(now)
        return enqueued

    def _claim_tick(self, entry: Entry, tick: int, enqueue: bool, now: float) -> int:
        blob, jid, queue = self._job(entry, tick, now) if enqueue else (b"", "", entry.queue)
        space = self.client.keys
        if not space.cluster:
            result = int(self._claim(keys=[keys.periodic(entry.id), keys.queue(queue), keys.QUEUES],
                                     args=[tick, blob, queue, jid, now, self.ttl]))
        else:  # the claim in the queue's slot; the record's last run written after it (see PERIODIC_CLAIM)
            if queue != entry.queue:
                raise ValueError(f"client middleware moved periodic job {entry.job_name!r} to queue {queue!r}; "
                                 "in Cluster mode a periodic job stays in its entry's queue")
            self.redis.sadd(keys.QUEUES, queue)
            result = int(self._claim(keys=[space.periodic_claim(entry.id, queue), space.queue(queue)],
                                     args=[tick, blob, queue, jid, now, self.ttl]))
            if result == 1:
                self.redis.hset(keys.periodic(entry.id), mapping={"last": tick, "last_run": tick, "last_jid": jid,
                                                                   "last_enqueued_at": now})
        late = now - tick
        if result == 1:
            level = logging.INFO if late > self.missed_after else logging.DEBUG
            log.log(level, "periodic %s: enqueued %s jid=%s for the tick of %s (%.3f s late)",
                    entry.id, entry.job_name, jid, _iso(tick), late)
        elif result == 2 and late > self.missed_after:
            log.info("periodic %s: skipped the missed tick of %s", entry.id, _iso(tick))
        return 1 if result == 1 else 0

    def _job(self, entry: Entry, tick: int, now: float) -> tuple[bytes, str, str]:
        """The tick's payload as a push would write it, its jid and queue (client middleware may
        have changed it); no payload (b"") if middleware stopped it."""
        options = merge_options(entry.options, {"custom": {"periodic": entry.id, "periodic_at": tick}})
        built, jids = self.client.build(entry.job, [entry.args], [None], now, options)
        if not built:
            return b"", "", entry.queue
        payload = built[0][0]
        payload["enqueued_at"] = stamp(now, self.client.config.sidekiq_version >= 8 or in_millis(payload))
        return self.client._encode(payload), str(jids[0]), str(payload["queue"])

    def _describe(self, entries: list[Entry], now: float) -> None:
        """Write each entry's description (and `seen`) for status readers elsewhere, now and then,
        and keep its record (and the set of ids) from expiring while this scheduler runs it."""
        if not self._adopted:
            self._adopt()
        stale = [e for e in entries if now - self._described.get(e.id, -math.inf) >= self.describe_every]
        if not stale:
            return
        pipe = self.redis.pipeline(transaction=False)
        for entry in stale:
            description: dict[Any, Any] = {**entry.fields(), "seen": now}
            pipe.sadd(keys.PERIODIC, entry.id)
            pipe.hset(keys.periodic(entry.id), mapping=description)
            pipe.expire(keys.periodic(entry.id), self.ttl)
        pipe.expire(keys.PERIODIC, self.ttl)
        pipe.execute()
        for entry in stale:
            self._described[entry.id] = now

    def _adopt(self) -> None:
        """Once per scheduler: give records written without a TTL (by a version before them)
        one, so an entry removed from the code back then goes away too; drop expired ids."""
        members = cast("list[bytes]", list(self.redis.smembers(keys.PERIODIC)))
        pipe = self.redis.pipeline(transaction=False)
        for member in members:
            pipe.ttl(keys.periodic(member.decode()))
        left: list[int] = pipe.execute() if members else []
        for member, ttl in zip(members, left, strict=True):
            if ttl == -1:
                pipe.expire(keys.periodic(member.decode()), self.ttl)
            elif ttl == -2:
                pipe.srem(keys.PERIODIC, member)
        pipe.execute()
        self._adopted = True

    def next_wait(self) -> float:
        """Seconds until the earliest next tick (past it by a hair), at most WAKE."""
        if not self._next:
            return WAKE
        earliest = min(self._next.values())
        return max(0.0, min(WAKE, earliest - self.clock() + EARLY))


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
