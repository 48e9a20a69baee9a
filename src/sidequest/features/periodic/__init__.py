"""Periodic jobs: cron or fixed-interval schedules, each tick enqueued exactly once across any
number of worker processes and hosts.

    import sidequest
    from datetime import timedelta

    sidequest.periodic("*/5 * * * *", report, args=["daily"], tz="Europe/Paris")
    sidequest.periodic("*/10 * * * * *", ping)                  # six fields: seconds first
    sidequest.periodic(job=ping, every=timedelta(seconds=30))

or in the config file, `:periodic:` (see `Config.periodic`). Parts, by role:

    schedule    when an entry fires: cron (croniter) in a time zone, or an epoch-aligned interval
    entries     Entry, the registry (`default_periodic`), `periodic(...)`, entries from the config
    scheduler   PeriodicScheduler, the thread each worker runs (started by the Launcher); one atomic
                claim per tick, its Lua beside it
    status      next and last run per entry, for the admin API, CLI and dashboard; `forget`

`sidequest.periodic` is the function (as `sidequest.job` is); import the rest from here:
`from sidequest.periodic import status`.
"""

from sidequest.features.periodic.entries import Entry, PeriodicRegistry, default_periodic, entries_from_config, periodic
from sidequest.features.periodic.schedule import Schedule, ScheduleError
from sidequest.features.periodic.scheduler import PeriodicScheduler
from sidequest.features.periodic.status import PeriodicStatus, forget, format_table, status

__all__ = [
    "Entry",
    "PeriodicRegistry",
    "PeriodicScheduler",
    "PeriodicStatus",
    "Schedule",
    "ScheduleError",
    "default_periodic",
    "entries_from_config",
    "forget",
    "format_table",
    "periodic",
    "status",
]
