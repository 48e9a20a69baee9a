"""One push, planned once for every client: what each connection is sent, and what the replies mean.

A push (`Client.write` and `AsyncClient.write`; tasks, workflows and `django.tasks` through
them) is a `Plan`: a generator of `Exchange`s, each a few commands written at once on ONE
connection to the primary of its key's slot, one reply read for each. A driver sends each
exchange and gives the replies back (`drive` for the sync client, `adrive` on redis.asyncio), so
both clients send the same commands and judge their replies alike:

- the jobs: MULTI, the push's commands (and a task's or workflow's records), EXEC; with unique
  jobs (and debounced or throttled ones, `flow`, and laned ones, `lanes`), one EVALSHA of
  `push_script.PUSH_UNIQUE` (with SCRIPT LOAD before it once Redis says it lost the script).
- `wait_replicas` (`Replicas`): a WAIT in the same exchange, right after the EXEC or the script
  call. WAIT counts the writes of the connection it is sent on: on any other connection it
  returns at once and confirms nothing. Without it nothing is added, and the push stays one
  round trip.
- Cluster mode: per slot (`Batch.per_slot`), the queues' names first added to `queues` (its own
  slot; at most every LISTED_EVERY s per queue and client), then the part's exchange, with its
  WAIT, on the primary of that slot. A MOVED or ASK answer means nothing ran: the slot map is
  read again (the exchange's `refresh`) and the exchange sent once more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import AskError, NoScriptError, ResponseError

from sidequest.client.push_script import PUSH_UNIQUE
from sidequest.errors import JobArgumentError, NotReplicatedError
from sidequest.store import keys, lanes
from sidequest.store.direct import Command, Recorder

BULK_BATCH = 1000  # payloads per LPUSH/ZADD, as Sidekiq's push_bulk batches
# Cluster mode: a client adds a queue's name to `queues` (in another slot than the queue) at most
# this often (seconds); the pollers and recoveries of the queue's workers look at it anyway
LISTED_EVERY = 5.0


@dataclass(frozen=True)
class Replicas:
    """What a push waits for: `count` replicas to hold it (Redis WAIT), at most `timeout` seconds."""

    count: int
    timeout: float

    def command(self) -> tuple[Any, ...] | None:
        """The WAIT to send after the push on its connection, or None when nothing is waited for."""
        return ("WAIT", self.count, max(1, round(self.timeout * 1000))) if self.count > 0 else None

    def check(self, confirmed: Any, batch: Batch) -> None:
        """Raise NotReplicatedError if fewer than `count` replicas confirmed the push."""
        got = int(confirmed)
        if got < self.count:
            jids = [payload["jid"] for payload, _, _ in batch.jobs]
            shown = ", ".join(jids[:3]) + (f" and {len(jids) - 3} more" if len(jids) > 3 else "")
            raise NotReplicatedError(
                f"pushed {len(jids)} job(s) ({shown}) to the primary, but {got} of the {self.count} replica(s) "
                f"asked for (wait_replicas) confirmed them within {self.timeout:g} s: a failover now could lose "
                "them; push again to be sure (an idempotent job may then run twice)", jids, got)


NO_REPLICAS = Replicas(0, 1.0)


class Batch:
    """One push, encoded (by `Client.prepare`): the commands of its MULTI, or (with unique jobs)
    its script call's keys and arguments."""

    def __init__(self, queue: str = "") -> None:
        self.queue = queue  # Cluster mode: the (first) queue of this part of a push (see `per_slot`)
        self.jobs: list[tuple[dict[str, Any], float | None, bytes]] = []  # payload, schedule time or None, JSON
        # per job: a unique claim's key and milliseconds; for debounce/throttle (`flow.claim`) its
        # record's, then the script's flow code, counts key and the class
        self.claims: list[tuple[str, int] | tuple[str, int, str, str, str] | None] = []
        self.records: list[tuple[str, int, str, str] | None] = []  # status key, milliseconds, state, due time
        self.lanes: list[lanes.LaneArgs | None] = []  # a laned job pushed now: its lane (`lanes.route`)
        self.unique = False  # some job has a claim or a lane: the push is one PUSH_UNIQUE call

    def add(self, payload: dict[str, Any], when: float | None, blob: bytes,
            claim: tuple[str, int] | tuple[str, int, str, str, str] | None,
            record: tuple[str, int, str, str] | None, lane: lanes.LaneArgs | None = None) -> None:
        self.jobs.append((payload, when, blob))
        self.claims.append(claim)
        self.records.append(record)
        self.lanes.append(lane)
        self.unique = self.unique or claim is not None or lane is not None

    def per_slot(self) -> list[Batch]:
        """Cluster mode: this push split by slot (a queue, or the queues of a group: see
        `keys.group_of`), in order of first job; with unique jobs, by queue (their script
        writes one queue's sets)."""
        parts: dict[str, Batch] = {}
        for (payload, when, blob), claim, record, lane in zip(self.jobs, self.claims, self.records, self.lanes,
                                                               strict=True):
            queue = payload["queue"]
            where = queue if self.unique else keys.group_of(queue)
            part = parts.get(where) or parts.setdefault(where, Batch(queue))
            part.add(payload, when, blob, claim, record, lane)
        return list(parts.values())

    def commands(self, pipe: Any, space: keys.Keyspace = keys.DEFAULT) -> None:
        """Queue the MULTI's commands on `pipe` (no unique jobs); in Cluster mode, of one queue's
        part (`per_slot`), whose queues' names the caller has added to `queues`."""
        queued: dict[str, list[bytes]] = {}
        scheduled: dict[str, list[tuple[bytes, float]]] = {}  # by sorted set: one, or in Cluster mode one a queue
        for payload, when, blob in self.jobs:
            if when is None:
                queued.setdefault(payload["queue"], []).append(blob)
            else:
                scheduled.setdefault(space.schedule(payload["queue"]), []).append((blob, when))
        for queue, blobs in queued.items():
            if not space.cluster:
                pipe.sadd(keys.QUEUES, queue)
            for start in range(0, len(blobs), BULK_BATCH):
                pipe.lpush(space.queue(queue), *blobs[start:start + BULK_BATCH])
        for key, entries in scheduled.items():
            for start in range(0, len(entries), BULK_BATCH):
                pipe.zadd(key, dict(entries[start:start + BULK_BATCH]))
        for record in self.records:
            if record is not None:
                key, ms, state, due = record
                pipe.hset(key, mapping={"state": state, "at": due})
                pipe.pexpire(key, ms)

    def script_args(self, space: keys.Keyspace = keys.DEFAULT) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of `push_script.PUSH_UNIQUE`, every job in order (Cluster mode: of one queue's
        part, without `queues`); a laned job's lane last."""
        args: list[Any] = [len(self.jobs)]
        for (payload, when, blob), claim, record, lane in zip(self.jobs, self.claims, self.records, self.lanes,
                                                               strict=True):
            taken = claim or ("", 0)
            args += [*taken[:2], payload["jid"], space.queue(payload["queue"]) if when is None else "",
                     payload["queue"], when or 0, blob, *(record or ("", 0, "", "")), *(taken[2:] or ("", "", "")),
                     *(lane or lanes.NO_LANE)]
        return [space.schedule(self.queue), keys.QUEUES], args

    def refused(self, written: list[Any]) -> frozenset[str]:
        """The jids the script did not write (their claim was held), from its reply."""
        return frozenset(payload["jid"] for (payload, _, _), ok in zip(self.jobs, written, strict=True)
                         if not int(ok))


# What a plan asks its driver to send: (key, commands, refresh), a plain tuple (one per push,
# on the hot path): write `commands` at once on one connection to the primary of `key`'s slot
# (on one Redis, its connection) and read one reply each; with `refresh`, read the slot map first.
Exchange = tuple[str, list[Command], bool]


Plan = Generator[Exchange, list[Any], frozenset[str]]  # returns the jids of unique jobs not written
Also = Callable[[Any], None]  # queues more commands of the push's MULTI on a pipeline-like recorder

_PUSH_SHA = hashlib.sha1(PUSH_UNIQUE.encode()).hexdigest()
_NONE: frozenset[str] = frozenset()


def plan(batch: Batch, space: keys.Keyspace, replicas: Replicas = NO_REPLICAS, also: Also | None = None,
         to_list: Callable[[list[str]], list[str]] = list) -> Plan:
    """The push of `batch` (see the module): `also` adds commands to its MULTI (a task's records),
    `to_list` picks the queue names a Cluster push adds to `queues` first. A push that cannot be
    written as asked is refused before anything is sent."""
    wait = replicas.command()
    tail = [wait] if wait else []
    if not space.cluster:
        if batch.unique:
            if also is not None:
                raise JobArgumentError("unique_for, debounce, throttle, group and priority are not available for the "
                                       "jobs of a task or workflow; push them without (e.g. .set(unique_for=None))")
            return (yield from _script(batch, "", space, tail, replicas))
        commands = _multi(batch, space, also, tail)
        judge(batch, (yield "", commands, False), replicas)
        return _NONE
    parts = batch.per_slot()
    if also is not None and (len(parts) != 1 or parts[0].unique):
        raise JobArgumentError("in Cluster mode the jobs of one task or workflow are pushed to one queue, or "
                               "the queues of one group, without unique_for, debounce, throttle, group or priority")
    refused: set[str] = set()
    for part in parts:
        names = to_list(list(dict.fromkeys(payload["queue"] for payload, _, _ in part.jobs)))
        if names:
            yield from _exchange(keys.QUEUES, [("SADD", keys.QUEUES, *names)])
        route = space.queue(part.queue)  # a queue's keys (schedule, claims, records) share its slot
        if part.unique:
            refused |= yield from _script(part, route, space, tail, replicas)
        else:
            judge(part, (yield from _exchange(route, _multi(part, space, also, tail))), replicas)
    return frozenset(refused)


def single(batch: Batch, space: keys.Keyspace, replicas: Replicas = NO_REPLICAS,
           also: Also | None = None) -> list[Command] | None:
    """The commands of a push that is one MULTI on one Redis (the common push), to send in one
    exchange and give the replies to `judge`; None for any other push (run its `plan`). The
    drivers' shortcut for the hot path: the same exchange `plan` yields, without a generator."""
    if space.cluster or batch.unique:
        return None
    wait = replicas.command()
    return _multi(batch, space, also, [wait] if wait else [])


def _multi(part: Batch, space: keys.Keyspace, also: Also | None, tail: list[Command]) -> list[Command]:
    """MULTI, the jobs' commands, `also`'s, EXEC, then `tail` (a WAIT)."""
    recorder = Recorder()
    recorder.commands.append(("MULTI",))
    part.commands(recorder, space)
    if also is not None:
        also(recorder)
    recorder.commands += [("EXEC",), *tail]
    return recorder.commands


def judge(part: Batch, replies: list[Any], replicas: Replicas) -> None:
    """Raise what the replies of a MULTI's exchange (`_multi`) say went wrong: a command that
    failed in EXEC, or fewer replicas than asked confirming it (WAIT, the last reply)."""
    waited = replicas.count > 0
    executed = replies[-2] if waited else replies[-1]
    if executed is None:
        raise redis.WatchError("the transaction was aborted")
    for reply in executed:
        if isinstance(reply, ResponseError):
            raise reply
    if waited:
        replicas.check(replies[-1], part)


def _script(part: Batch, route: str, space: keys.Keyspace, tail: list[Command], replicas: Replicas) -> Plan:
    """A push with unique jobs: one PUSH_UNIQUE call (and its WAIT) in one exchange."""
    script_keys, args = part.script_args(space)
    if space.cluster:
        script_keys = script_keys[:1]  # not `queues`, another slot: added before (see `plan`)
    call = ("EVALSHA", _PUSH_SHA, len(script_keys), *script_keys, *args)
    replies = yield from _exchange(route, [call, *tail], loads=PUSH_UNIQUE)
    if tail:
        replicas.check(replies[1], part)
    return part.refused(replies[0])


def _exchange(key: str, commands: list[Command], loads: str | None = None) -> Generator[Exchange, list[Any], list[Any]]:
    """The replies of `commands`, sent once more when Redis refused them before running anything:
    a lost script (`loads`: its source, loaded first), a slot that moved."""
    exchange: Exchange = (key, commands, False)
    loaded = moved = False
    while True:
        try:
            replies = yield exchange
        except NoScriptError:
            if loads is None or loaded:
                raise
            loaded = True
            exchange = (key, [("SCRIPT", "LOAD", loads), *commands], moved)
            continue
        except AskError:  # MOVED too: the first command was refused, so the MULTI or script never ran
            if moved:
                raise
            moved = True
            exchange = (key, exchange[1], True)
            continue
        return replies[1:] if loaded else replies


def drive(push: Plan, send: Callable[[Exchange], list[Any]]) -> frozenset[str]:
    """Run a plan with `send` (an exchange's replies, an error reply raised): the sync driver."""
    try:
        exchange = next(push)
        while True:
            try:
                replies = send(exchange)
            except ResponseError as exc:  # the plan decides: a lost script, a moved slot
                exchange = push.throw(exc)
            else:
                exchange = push.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(push: Plan, send: Callable[[Exchange], Awaitable[list[Any]]]) -> frozenset[str]:
    """`drive` on redis.asyncio."""
    try:
        exchange = next(push)
        while True:
            try:
                replies = await send(exchange)
            except ResponseError as exc:
                exchange = push.throw(exc)
            else:
                exchange = push.send(replies)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
