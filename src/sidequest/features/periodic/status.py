"""Reading periodic entries for people: next and last run of each (the admin API, CLI and
dashboard call `status`), and `forget` for an entry that no longer exists.

The entries listed are those registered in the reading process, plus every entry that a
running scheduler has described in Redis (so a dashboard process that imported no job module
still sees them all). `seen` says when a scheduler last described an entry: one removed from
the code stops being refreshed, stays listed until its record expires (`periodic_ttl` after the
last description, see `scheduler`), and is gone from then on; `forget(entry_id)` removes it at once.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, cast

from sidequest.client.sync_client import Client, default_client
from sidequest.features.periodic.entries import PeriodicRegistry, default_periodic
from sidequest.features.periodic.schedule import Schedule, ScheduleError
from sidequest.store import keys


@dataclass(frozen=True)
class PeriodicStatus:
    """One entry as people read it. Times are epoch seconds (float), None when unknown."""

    id: str  # the entry's stable id
    schedule: str  # "*/5 * * * *", "0 9 * * 1 Europe/Paris", "every 30s"
    job: str  # the job's wire name (payload `class`)
    queue: str
    missed: str  # "enqueue" or "skip"
    next_run: float | None  # the next tick (None: this process cannot read the schedule)
    last_run: float | None  # the newest tick that was enqueued (None: never yet)
    last_jid: str | None  # the jid of that job
    last_enqueued_at: float | None  # when that job was pushed
    seen: float | None  # when a running scheduler last described the entry (None: never)
    registered: bool  # registered in this process

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def status(client: Client | None = None, *, registry: PeriodicRegistry | None = None,
           now: float | None = None) -> list[PeriodicStatus]:
    """Every known periodic entry with its next and last run, soonest next run first.

        from sidequest.features.periodic import status
        for entry in status():
            print(entry.id, entry.next_run, entry.last_run)
    """
    client = client or default_client()
    now = time.time() if now is None else now
    local = {e.id: e for e in (default_periodic if registry is None else registry).entries()}
    members = cast("set[bytes]", client.redis.smembers(keys.PERIODIC))
    ids = sorted({raw.decode() for raw in members} | set(local))
    pipe = client.redis.pipeline(transaction=False)
    for entry_id in ids:
        pipe.hgetall(keys.periodic(entry_id))
    found: list[PeriodicStatus] = []
    for entry_id, raw in zip(ids, pipe.execute(), strict=True):
        stored = {k.decode(): v.decode() for k, v in raw.items()}
        entry = local.get(entry_id)
        if not stored and entry is None:  # its record expired: no scheduler has run it for periodic_ttl
            continue  # (a starting scheduler drops the id from the set)
        fields = {**stored, **entry.fields()} if entry is not None else stored
        schedule = entry.schedule if entry is not None else _schedule(stored)
        last = _number(stored.get("last"))
        found.append(PeriodicStatus(
            id=entry_id, schedule=fields.get("schedule", ""), job=fields.get("class", ""),
            queue=fields.get("queue", ""), missed=fields.get("missed", ""),
            next_run=None if schedule is None else schedule.next_after(max(now, last or now)),
            last_run=_number(stored.get("last_run")), last_jid=stored.get("last_jid") or None,
            last_enqueued_at=_number(stored.get("last_enqueued_at")), seen=_number(stored.get("seen")),
            registered=entry is not None,
        ))
    return sorted(found, key=lambda s: (s.next_run is None, s.next_run or 0.0, s.id))


def forget(entry_id: str, client: Client | None = None) -> bool:
    """Delete the records of an entry removed from the code; True if there were any. An entry
    still registered in a running worker is described again within 30 s."""
    client = client or default_client()
    # one MULTI; in Cluster mode the two keys are in two slots, so two deletes in one round trip
    pipe = client.redis.pipeline(transaction=not client.keys.cluster)
    pipe.srem(keys.PERIODIC, entry_id)
    pipe.delete(keys.periodic(entry_id))
    removed, deleted = pipe.execute()
    return bool(removed or deleted)


def _schedule(fields: dict[str, str]) -> Schedule | None:
    try:
        return Schedule.from_fields(fields)
    except (ScheduleError, ValueError):
        return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def format_table(statuses: list[PeriodicStatus], now: float | None = None) -> str:
    """Entries as a text table, times in UTC with how far away they are (`sidequest periodic`)."""
    now = time.time() if now is None else now
    rows = [("ID", "SCHEDULE", "JOB", "QUEUE", "NEXT RUN", "LAST RUN")]
    rows += [(s.id, s.schedule, s.job, s.queue, _when(s.next_run, now), _when(s.last_run, now)) for s in statuses]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def _when(epoch: float | None, now: float) -> str:
    if epoch is None:
        return "-"
    delta = epoch - now
    away = _span(abs(delta))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))
    return f"{stamp} (in {away})" if delta >= 0 else f"{stamp} ({away} ago)"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"
