"""A job's state and result by jid: `status(jid)` and `result(jid, timeout)`.

    sidequest.status(jid)                 # 'queued' | 'scheduled' | 'waiting' | 'running' | 'retry'
                                          # | 'dead' | 'done' | 'cancelled' | 'unknown'
    sidequest.result(jid, timeout=10)     # the return value; JobFailed if it ended dead

Each lookup is written once, as a generator of Redis commands (`status_query`, `result_query`),
and run by a driver: `run` here on a `redis.Redis`, `aio.run` on `redis.asyncio`, so the two
APIs answer alike.

What a status costs:
- A job pushed with `result_ttl` has a record (see `results`): one HGETALL. This is the
  intended way to follow a job.
- Any other job is searched for where it can be, in the order a job moves through them:
  `schedule` (ZSCAN, matching on the jid in Redis), its queue (LRANGE in pages: the whole
  queue crosses the network in the worst case; every queue in `queues` when `queue=` is not
  given), the running jobs (the `<identity>:work` hash of every live process and every
  reserved list: small), then `retry` and `dead` (ZSCAN). That is O(size of those sets and
  queues) per call: fine for an occasional look, not for polling a busy system. A plain job
  that is done leaves no trace, so it is `unknown`; so is one that moves while it is searched
  for, in the rare case it moves behind the search.
- In Cluster mode (`space` a `keys.ClusterKeyspace`) the same search looks at each queue's own
  sets (`schedule:{q}`, `retry:{q}`, `dead:{q}`) and reserved lists (indexed in
  `sidequest:reservations:{q}`), for every queue in `queues`, or for `queue` alone when given.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis

from sidequest.client.plugins import Command, Query
from sidequest.errors import WAITING, Cancelled, JobFailed, NoResultError
from sidequest.features.results import ENDED, STATES
from sidequest.jobs.options import seconds_option
from sidequest.jobs.payload import decode
from sidequest.store import keys

if TYPE_CHECKING:
    from sidequest.client.sync_client import Client

T = TypeVar("T")

PAGE = 1000  # queue entries per LRANGE, set entries per ZSCAN step
WAIT_STEP = 5.0  # longest single block while waiting for a result (below the socket timeout)


@dataclass(frozen=True)
class Found:
    """What a lookup found: the state, and the record (a `result_ttl` job) or the payload found."""

    state: str
    record: dict[str, bytes] | None = None
    payload: dict[str, Any] | None = None
    queue: str | None = None  # Cluster mode: the queue whose slot holds the record


def _cmd(name: str, *args: Any, **kwargs: Any) -> Command:
    return name, args, kwargs


def _check_jid(jid: Any) -> str:
    if not isinstance(jid, str) or not jid:
        raise ValueError(f"a jid is a non-empty string, got {jid!r}")
    return jid


# -- the queries ---------------------------------------------------------------------------------
def status_query(jid: str, queue: str | None = None, clock: Callable[[], float] = time.time,
                 space: keys.Keyspace = keys.DEFAULT) -> Query[Found]:
    """The state of `jid`: its record if it has one, else a search (see the module docstring);
    `space` is the keyspace of the client the query runs on (`keys.space(client)`)."""
    _check_jid(jid)
    if space.cluster:  # the record is beside the job, in its queue's slot: look in each queue's
        names = yield from _queue_names(queue)
        records = (yield [_cmd("hgetall", space.status(jid, name)) for name in names]) if names else []
        for name, stored in zip(names, records, strict=True):
            if stored:
                record = {k.decode(): v for k, v in stored.items()}
                return Found(state_of(record, clock()), record=record, queue=name)
        return (yield from search(jid, queue, space))
    [stored] = yield [_cmd("hgetall", keys.status(jid))]
    if stored:
        record = {k.decode(): v for k, v in stored.items()}
        return Found(state_of(record, clock()), record=record)
    return (yield from search(jid, queue, space))


def state_query(jid: str, queue: str | None, clock: Callable[[], float], space: keys.Keyspace) -> Query[str]:
    """`status_query`'s state alone: what `status` answers, and the client's seam asks (`plugins`)."""
    return (yield from status_query(jid, queue, clock, space)).state


def state_of(record: dict[str, bytes], now: float) -> str:
    """A record's state; a scheduled or retrying job whose time has passed is queued (the
    poller moves it with no lifecycle operation, see `results`)."""
    state = record.get("state", b"").decode()
    if state in ("scheduled", "waiting", "retry"):
        try:
            due = float(record.get("at") or 0)
        except ValueError:
            due = 0.0
        if due and due <= now:
            return "queued"
    return state if state in STATES else "unknown"


def _queue_names(queue: str | None) -> Query[list[str]]:
    """`[queue]`, or when None every queue in `queues`, sorted."""
    if queue is not None:
        return [queue]
    [members] = yield [_cmd("smembers", keys.QUEUES)]
    return sorted(m.decode() for m in members)


def search(jid: str, queue: str | None = None, space: keys.Keyspace = keys.DEFAULT) -> Query[Found]:
    """Find a job that keeps no record, where it can be, in the order jobs move."""
    if space.cluster:
        return (yield from _search_cluster(jid, queue, space))
    pattern = _pattern(jid)
    found = yield from _zscan(keys.SCHEDULE, pattern, jid)
    if found is not None:
        return Found(_scheduled(found), payload=found)
    names = yield from _queue_names(queue)
    for name in names:
        found = yield from _lscan(keys.queue(name), jid)
        if found is not None:
            return Found("queued", payload=found)
    [processes, reservations] = yield [_cmd("smembers", keys.PROCESSES), _cmd("smembers", keys.RESERVATIONS)]
    found = yield from _running(jid, processes, reservations)
    if found is not None:
        return Found("running", payload=found)
    for key, state in ((keys.RETRY, "retry"), (keys.DEAD, "dead")):
        found = yield from _zscan(key, pattern, jid)
        if found is not None:
            return Found(state, payload=found)
    return Found("unknown")


def _search_cluster(jid: str, queue: str | None, space: keys.Keyspace) -> Query[Found]:
    """`search` in Cluster mode: the same order, over each queue's own keys (see the module)."""
    pattern = _pattern(jid)
    names = yield from _queue_names(queue)
    for name in names:
        found = yield from _zscan(space.schedule(name), pattern, jid)
        if found is not None:
            return Found(_scheduled(found), payload=found)
    for name in names:
        found = yield from _lscan(space.queue(name), jid)
        if found is not None:
            return Found("queued", payload=found)
    step = [_cmd("smembers", keys.PROCESSES), *(_cmd("smembers", space.reservations(name)) for name in names)]
    [processes, *indexes] = yield step
    found = yield from _running(jid, processes, set().union(*indexes))
    if found is not None:
        return Found("running", payload=found)
    for kind, state in ((space.retry, "retry"), (space.dead, "dead")):
        for name in names:
            found = yield from _zscan(kind(name), pattern, jid)
            if found is not None:
                return Found(state, payload=found)
    return Found("unknown")


def _scheduled(payload: dict[str, Any]) -> str:
    """A job in `schedule`: waiting when a durable sleep or wait parked it there, else scheduled."""
    return "waiting" if WAITING in payload else "scheduled"


def _pattern(jid: str) -> str:
    return "*" + re.sub(r"([*?\[\]\\])", r"\\\1", jid) + "*"


def _running(jid: str, processes: set[bytes], reservations: set[bytes]) -> Query[dict[str, Any] | None]:
    """The job among the running ones: every live process's work hash, every reserved list."""
    step = [_cmd("hvals", keys.work(p.decode())) for p in processes]
    step += [_cmd("lrange", r.decode(), 0, -1) for r in reservations]
    for entries in (yield step) if step else []:
        found = _match(entries, jid)
        if found is not None:
            return found
    return None


def _zscan(key: str, pattern: str, jid: str) -> Query[dict[str, Any] | None]:
    cursor = 0
    while True:
        [(cursor, entries)] = yield [_cmd("zscan", key, cursor, match=pattern, count=PAGE)]
        found = _match([member for member, _ in entries], jid)
        if found is not None or not int(cursor):
            return found


def _lscan(key: str, jid: str) -> Query[dict[str, Any] | None]:
    """Page through a list from its head (newest): LPUSHes only shift entries further on, so
    none is skipped while the list changes."""
    start = 0
    while True:
        [entries] = yield [_cmd("lrange", key, start, start + PAGE - 1)]
        found = _match(entries, jid)
        if found is not None or len(entries) < PAGE:
            return found
        start += PAGE


def _match(entries: list[bytes], jid: str) -> dict[str, Any] | None:
    """The payload among `entries` (payloads, or `<identity>:work` values wrapping one) whose jid is `jid`."""
    needle = jid.encode()
    for raw in entries:
        if needle not in raw:
            continue
        try:
            data = decode(raw)
        except ValueError:
            try:  # a work entry: {"queue": ..., "payload": "<payload JSON>", "run_at": ...}
                data = decode(json.loads(raw)["payload"])
            except (ValueError, KeyError, TypeError):
                continue
        if data.get("jid") == jid:
            return data
    return None


def result_query(jid: str, timeout: float | None = 10.0, clock: Callable[[], float] = time.monotonic,
                 space: keys.Keyspace = keys.DEFAULT) -> Query[Any]:
    """Wait until `jid` has ended; its return value, or JobFailed / Cancelled / NoResultError /
    TimeoutError. It blocks on the job's notify list (see `results`), waking at the end at once."""
    deadline = None if timeout is None else clock() + timeout
    while True:
        found = yield from status_query(jid, space=space)
        if found.state in ENDED or found.state == "unknown":
            return _ended(jid, found)
        if found.record is None and seconds_option((found.payload or {}).get("result_ttl")) is None:
            raise NoResultError(f"job {jid} ({(found.payload or {}).get('class')}) is {found.state} but keeps "
                                "no result; push it with the result_ttl option to wait for its return value")
        # (a result_ttl job whose record expired while it waited writes one again at its next change)
        remaining = WAIT_STEP if deadline is None else deadline - clock()
        if remaining <= 0:
            raise TimeoutError(f"job {jid} is still {found.state} after {timeout:g} s")
        notify = space.status_notify(jid, found.queue or str((found.payload or {}).get("queue") or "default"))
        # the list onto itself: the token stays for every other waiter
        yield [_cmd("blmove", notify, notify, max(min(remaining, WAIT_STEP), 0.01), "RIGHT", "LEFT")]


def _ended(jid: str, found: Found) -> Any:
    """The result of an ended job, or the error that says why there is none."""
    source: dict[str, Any] = found.payload or {}
    if found.record is not None:
        source = {k: v.decode("utf-8", "replace") for k, v in found.record.items() if k != "result"}
    if found.state == "done" and found.record is not None:
        if "result" in found.record:
            return json.loads(found.record["result"])
        raise NoResultError(f"job {jid} is done, but its return value was not kept: "
                            f"{source.get('result_error', 'no value recorded')}")
    if found.state == "dead":
        error = ": ".join(str(source[k]) for k in ("error_class", "error_message") if source.get(k))
        reason = source.get("reason")
        raise JobFailed(f"job {jid} ended dead: {error or reason or 'no error recorded'}"
                        + (f" ({reason})" if error and reason else ""))
    if found.state == "cancelled":
        raise Cancelled(f"job {jid} was cancelled")
    raise NoResultError(f"job {jid} is unknown: it never existed, or it ended without keeping a result "
                        "(it was pushed without result_ttl), or its record expired")


# -- running them --------------------------------------------------------------------------------
def run(query: Query[T], client: redis.Redis) -> T:
    """Run a query on a synchronous client: one round trip per step (a pipeline when it has several)."""
    try:
        step = next(query)
        while True:
            step = query.send(_execute(client, step))
    except StopIteration as stop:
        return cast("T", stop.value)


def _execute(client: redis.Redis, step: list[Command]) -> list[Any]:
    if len(step) == 1:
        name, args, kwargs = step[0]
        return [getattr(client, name)(*args, **kwargs)]
    pipe = client.pipeline(transaction=False)
    for name, args, kwargs in step:
        getattr(pipe, name)(*args, **kwargs)
    return pipe.execute()


def _client(client: Client | None) -> Client:
    from sidequest.client.sync_client import default_client

    return client if client is not None else default_client()


def status(jid: str, *, queue: str | None = None, client: Client | None = None) -> str:
    """The state of job `jid`: queued, scheduled, waiting, running, retry, dead, done, cancelled or unknown.

    O(1) for a job pushed with `result_ttl`; any other job is searched for (see the module
    docstring for the cost), in `queue` only when given. A plain job that is done is unknown.
    """
    chosen = _client(client)
    return run(state_query(jid, queue, chosen.clock, chosen.keys), chosen.redis)


def result(jid: str, timeout: float | None = 10.0, *, client: Client | None = None) -> Any:
    """Wait up to `timeout` seconds (None: no limit) for job `jid` to end; return what it returned.

    Raises JobFailed (with the error) if it ended dead, Cancelled if it was cancelled,
    NoResultError if there is no result to wait for (an unknown jid, a job pushed without
    `result_ttl`, a return value that is not JSON), TimeoutError when time runs out.
    """
    chosen = _client(client)
    return run(result_query(jid, timeout, space=chosen.keys), chosen.redis)
