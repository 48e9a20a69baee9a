"""Periodic entries and the registry the schedulers read.

An entry is a job, its arguments and options, and a schedule, under a stable id. The id names
its record in Redis (`keys.periodic(id)`: the newest tick handled, the last run), so it must
stay the same across deploys: by default it is the job's wire name and the schedule's text
(`myapp.jobs.report */5 * * * * Europe/Paris`); changing the schedule makes a new entry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidequest.errors import ConfigError, JobArgumentError, JobDefinitionError, SidequestError
from sidequest.features.periodic.schedule import Schedule, ScheduleError
from sidequest.jobs.options import DEFAULTS, check_options
from sidequest.jobs.payload import check_args
from sidequest.jobs.registry import Registry

MISSED = ("enqueue", "skip")


@dataclass(frozen=True, eq=False)
class Entry:
    """One periodic job. `job` is what `Client.build` takes: a Job class, a `@job` function, or
    a wire name (a job of another codebase, e.g. Ruby's)."""

    id: str
    schedule: Schedule
    job: Any
    job_name: str
    args: list[Any]
    queue: str
    missed: str = "enqueue"  # a tick missed while no worker ran: enqueue it once, or skip it
    options: dict[str, Any] = field(default_factory=dict)  # per-entry job options (queue included)

    def spec(self) -> tuple[Any, ...]:
        """What makes two registrations the same entry (re-importing a module is harmless)."""
        return (self.schedule, self.job_name, self.args, self.queue, self.missed, self.options)

    def fields(self) -> dict[str, str]:
        """Its description, written to Redis for status readers that did not register it."""
        return {**self.schedule.fields(), "schedule": self.schedule.text, "class": self.job_name,
                "queue": self.queue, "missed": self.missed}


def make_entry(cron: str | None, job: Any, *, every: Any = None, args: Sequence[Any] = (), tz: Any = None,
               queue: str | None = None, id: str | None = None, missed: str = "enqueue",
               **options: Any) -> Entry:
    """A checked entry; raises ScheduleError or JobArgumentError (the callers add context)."""
    schedule = Schedule.parse(cron=cron, every=every, tz=tz)
    name = job if isinstance(job, str) else getattr(job, "name", None)
    if not isinstance(name, str) or not name:
        raise JobArgumentError(f"job must be a Job class, a @job function or a job name, got {job!r}")
    if missed not in MISSED:
        raise JobArgumentError(f"missed must be 'enqueue' or 'skip', got {missed!r}")
    if isinstance(args, (str, bytes, Mapping)):
        raise JobArgumentError(f"args must be a list of the job's arguments, got {args!r}")
    checked_args = check_args(list(args))
    fits = getattr(job, "check_arguments", None)
    if not isinstance(job, str) and callable(fits):
        fits(checked_args)  # the job's own parameters, as at every push
    if queue is not None:
        options["queue"] = queue
    options = check_options(options)
    defaults = job.payload_options() if callable(getattr(job, "payload_options", None)) else DEFAULTS
    entry_id = id if id is not None else f"{name} {schedule.text}"
    if not isinstance(entry_id, str) or not entry_id.strip():
        raise JobArgumentError(f"id must be a non-empty string, got {entry_id!r}")
    return Entry(entry_id, schedule, job, name, checked_args, options.get("queue", defaults["queue"]),
                 missed, options)


class PeriodicRegistry:
    """The entries a process's scheduler runs (and that `status` knows without Redis)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def add(self, entry: Entry) -> Entry:
        with self._lock:
            existing = self._entries.get(entry.id)
            if existing is not None and existing.spec() != entry.spec():
                raise JobDefinitionError(
                    f"periodic entry {entry.id!r} is already registered with another schedule, job, "
                    "arguments or options; give each entry its own id=")
            self._entries[entry.id] = entry
        return entry

    def remove(self, entry_id: str) -> None:
        with self._lock:
            self._entries.pop(entry_id, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)


default_periodic = PeriodicRegistry()


def periodic(cron: str | None = None, job: Any = None, *, every: Any = None, args: Sequence[Any] = (),
             tz: Any = None, queue: str | None = None, id: str | None = None, missed: str = "enqueue",
             registry: PeriodicRegistry | None = None, **options: Any) -> Entry:
    """Run `job` on a schedule, from every worker process that registered it; each tick is
    enqueued exactly once, however many workers run.

        sidequest.periodic("*/5 * * * *", report, args=["daily"], tz="Europe/Paris")
        sidequest.periodic("*/10 * * * * *", ping)              # six fields: seconds first
        sidequest.periodic(job=ping, every=timedelta(seconds=30))

    `cron` (five fields, or six with seconds in front; `tz` an IANA zone name, UTC by default)
    or `every` (a timedelta or seconds, aligned to the epoch). `missed="skip"` drops a tick that
    came while no worker was running instead of enqueuing it once on return. `id` is the
    entry's stable name (default: the job's name and the schedule). Other keywords are job
    options for these pushes (`retry=...`). Call it in a module the worker imports (`-r`).
    """
    try:
        entry = make_entry(cron, job, every=every, args=args, tz=tz, queue=queue, id=id, missed=missed,
                           **options)
    except (ScheduleError, JobArgumentError) as exc:
        raise JobDefinitionError(f"periodic {cron or every!r}: {exc}") from None
    return (default_periodic if registry is None else registry).add(entry)


def entries_from_config(items: Iterable[Mapping[str, Any]], jobs: Registry) -> list[Entry]:
    """Entries from the config file's `:periodic:` list (see `Config.periodic`); a `class` that
    is registered in this process is used as that job (its options, its arguments checked)."""
    entries: dict[str, Entry] = {}
    for index, item in enumerate(items):
        values = dict(item)
        name = values.pop("class")
        job: Any = jobs.get(name) if name in jobs else name
        try:
            entry = make_entry(values.pop("cron", None), job, **values)
        except (ScheduleError, SidequestError, TypeError) as exc:
            raise ConfigError(f"periodic entry {index + 1} ({name}): {exc}") from None
        if entry.id in entries:
            raise ConfigError(f"periodic entry {index + 1} ({name}): the id {entry.id!r} is taken; "
                              "give it its own id:")
        entries[entry.id] = entry
    return list(entries.values())

