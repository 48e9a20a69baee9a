"""Sending an event to a job's durable wait (`sidequest.wait_for`), from anywhere, by jid alone.

    sidequest.send_event(jid, "approved", {"by": "ada"})              # True: a parked wait woke
    await sidequest.aio.send_event(jid, "approved", {"by": "ada"})    # the same, on asyncio

Where things are, so that the jid alone finds them: a parked job is an entry of `schedule` (of its
queue's `schedule:{q}` in Cluster mode), and its records hash (`keys.steps`, in the same slot)
holds that exact entry (`parked`, written by the call that parks it) and the event it waits for
(`waiting`). So a send is: find the records (one EXISTS on one Redis; on a Cluster one per queue
in `queues`), keep the event there (`lua.EVENT_SEND`), and, when the job is parked on it, move
that entry to its queue as the poller moves a due job (`poller.due_entry`, `ENQUEUE_DUE`: it
runs at once). Two atomic calls in that order: a crash between them leaves the job parked until
its timeout, when it resumes and finds the event; the move of an entry that is gone (the poller
or a cancel came first) writes nothing.

A job that has no records yet (queued, scheduled or running before its first step or wait) is
searched for as `sidequest.status` searches (`lookup.search`: O(waiting jobs)), and its records
are made with the event in them: an event sent before the wait is kept for it. No job of that
jid anywhere: `EventError`. The send is written once, as a query of Redis commands
(`send_query`), run by `lookup.run` on a blocking client and by `aio.run` on redis.asyncio (which
finds it through the client's seam, `client.plugins`, where `features.registry` registers it).
"""

from __future__ import annotations

import json
from typing import Any, cast

from sidequest.client.plugins import Command, Query
from sidequest.client.sync_client import Client, default_client
from sidequest.errors import EventError, JobArgumentError, PayloadError, StepError
from sidequest.features import lookup
from sidequest.features.steps.lua import EVENT_SEND
from sidequest.features.steps.records import digest_of
from sidequest.jobs.payload import check_json_value, decode
from sidequest.store import keys
from sidequest.store.scripts import ENQUEUE_DUE
from sidequest.worker.background.poller import due_entry

MAX_PAYLOAD = 256 * 1024  # bytes of JSON an event may carry, as a step's result (`run.MAX_RESULT`)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _cmd(name: str, *args: Any) -> Command:
    return name, args, {}


def encoded(name: Any, payload: Any) -> str:
    """The event's payload as JSON, or a one-line error (a bad name, not JSON, too large)."""
    if not isinstance(name, str) or not name:
        raise StepError(f"an event's name is a non-empty string, got {name!r}")
    try:
        check_json_value(payload, f"the payload of event {name!r}")
        blob = _ENCODER.encode(payload)
    except (JobArgumentError, ValueError, TypeError) as exc:
        raise StepError(f"{exc}; send JSON (dicts, lists, str, numbers, bools, None)") from None
    if len(blob.encode("utf-8")) > MAX_PAYLOAD:
        raise StepError(f"the payload of event {name!r} is over {MAX_PAYLOAD:,} bytes of JSON: send an id")
    return blob


def send_query(jid: str, name: str, blob: str, now: float, space: keys.Keyspace, millis: bool) -> Query[bool]:
    """Keep event `name` (payload JSON `blob`) for job `jid`'s wait; True when a parked wait woke."""
    if not isinstance(jid, str) or not jid:
        raise EventError(f"a jid is a non-empty string, got {jid!r}")
    key = yield from _records(jid, space)
    made = ["", "", "", ""]
    if key is None:
        found = yield from lookup.search(jid, None, space)
        job = found.payload
        if job is None:
            raise EventError(f"no job {jid} to send event {name!r} to: none waits, runs or is queued with that "
                             "jid (it never existed, or it has ended)")
        queue = str(job.get("queue") or "default")
        key, made = space.steps(jid, queue), [digest_of(job), jid, str(job.get("class", "")), queue]
    ttl_ms = keys.STEPS_TTL * 1000
    [reply] = yield [_cmd("eval", EVENT_SEND, 1, key, name, blob, repr(now), ttl_ms, *made)]
    kept, parked = int(reply[0]), cast("bytes | str", reply[1])
    if not kept:  # the records ended between the look and the send: the job ended with them
        raise EventError(f"job {jid} ended before event {name!r} could be kept for it")
    if not parked:
        return False
    return (yield from _wake(parked.encode() if isinstance(parked, str) else parked, now, space, millis))


def _records(jid: str, space: keys.Keyspace) -> Query[str | None]:
    """The key of `jid`'s records, or None (see `records.find_key`, whose query this is)."""
    if not space.cluster:
        key = space.steps(jid, "")
        [exists] = yield [_cmd("exists", key)]
        return key if exists else None
    [members] = yield [_cmd("smembers", keys.QUEUES)]
    candidates = [space.steps(jid, q) for q in sorted(m.decode() for m in members)]
    found = (yield [_cmd("exists", k) for k in candidates]) if candidates else []
    return next((k for k, exists in zip(candidates, found, strict=True) if exists), None)


def _wake(raw: bytes, now: float, space: keys.Keyspace, millis: bool) -> Query[bool]:
    """Move the parked entry `raw` from `schedule` to its queue now (nothing if it is gone)."""
    try:
        payload = decode(raw)
    except PayloadError:
        return False
    queue = str(payload.get("queue") or "default")
    blob, lane = due_entry(payload, now, millis, space, queue)
    lane_args = list(lane or ())
    if space.cluster:
        keys_ = [space.schedule(queue), space.queue(queue)]
    else:
        keys_ = [keys.SCHEDULE, keys.queue(queue), keys.QUEUES]
    [moved] = yield [_cmd("eval", ENQUEUE_DUE, len(keys_), *keys_, raw, blob, queue, *lane_args)]
    return int(moved) > 0


def send_event(jid: str, name: str, payload: Any = None, *, client: Client | None = None) -> bool:
    """Send event `name` with `payload` (native JSON) to job `jid`'s `sidequest.wait_for(name)`.

    The job resumes at once (within about a second) when it is parked on that wait; an event sent
    before the wait is kept for it (a later one of the same name replaces it). True when a parked
    wait was woken, False when the event was kept for later. Raises `EventError` when no job of
    that jid exists (it never did, or it has ended), `StepError` for a payload that is not JSON."""
    chosen = client or default_client()
    query = event_query(jid, name, payload, chosen.clock(), chosen.keys, chosen.config.sidekiq_version >= 8)
    return lookup.run(query, chosen.redis)


def event_query(jid: str, name: str, payload: Any, now: float, space: keys.Keyspace, millis: bool) -> Query[bool]:
    """`send_query` of `payload` (checked and encoded now: a bad one is refused before any command):
    what `send_event` runs, and the client's seam asks (`plugins`) for the asyncio form."""
    return send_query(jid, name, encoded(name, payload), now, space, millis)
