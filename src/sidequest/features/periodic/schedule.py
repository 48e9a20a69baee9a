"""When an entry fires: a cron expression in a time zone, or a fixed interval.

    Schedule.parse(cron="*/5 * * * *", tz="Europe/Paris")   # five fields: minute first
    Schedule.parse(cron="*/10 * * * * *")                    # six fields: seconds first
    Schedule.parse(every=timedelta(minutes=1))               # on every minute since the epoch

Cron expressions are parsed and walked by croniter (`second_at_beginning=True`, so a sixth field
is the seconds in front, as in Quartz, Spring and node-cron; croniter's own default puts it
last), on wall-clock times in the schedule's zone, so `0 9 * * *` in Europe/Paris is 09:00
Paris time in winter and in summer. A tick is a whole epoch second.

An interval is aligned to the Unix epoch, not to when a worker started: `every=1h` fires on the
hour (UTC), and every process computes the same ticks without talking to the others.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from croniter import croniter

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")


class ScheduleError(ValueError):
    """A cron expression, interval or time zone that cannot be used (callers re-raise it as a
    JobDefinitionError or ConfigError, with the entry named)."""


def parse_every(every: Any) -> int:
    """Whole seconds >= 1 from a timedelta, a number of seconds, or text such as `90s`, `5m`, `1d`."""
    if isinstance(every, timedelta):
        seconds: Any = every.total_seconds()
    elif isinstance(every, str):
        match = _DURATION.match(every)
        if not match:
            raise ScheduleError(f"every={every!r}: write a number of seconds, or a number with s, m, h or d")
        seconds = int(match.group(1)) * UNITS[match.group(2) or "s"]
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = every
    else:
        raise ScheduleError(f"every must be a timedelta or a number of seconds, got {type(every).__name__}")
    if not math.isfinite(seconds) or seconds < 1 or seconds != int(seconds):
        raise ScheduleError(f"every must be a whole number of seconds, 1 or more; got {every!r}")
    return int(seconds)


def zone_name(tz: Any) -> str:
    """The IANA name of `tz` (a name, a ZoneInfo, or timezone.utc), checked to exist."""
    if tz is None or tz is UTC:
        return "UTC"
    if isinstance(tz, ZoneInfo):
        return tz.key
    if isinstance(tz, tzinfo):
        raise ScheduleError(f"tz={tz!r}: give an IANA zone name such as 'Europe/Paris', or a ZoneInfo")
    if not isinstance(tz, str) or not tz:
        raise ScheduleError(f"tz must be an IANA zone name such as 'Europe/Paris', got {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"tz={tz!r} is not a known time zone (IANA names, e.g. 'Europe/Paris')") from None
    return tz


def format_seconds(seconds: int) -> str:
    """90 -> '1m30s', 86400 -> '1d'."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


@dataclass(frozen=True)
class Schedule:
    """Exactly one of `cron` (five or six fields, or @hourly and the like) and `every` (seconds)."""

    cron: str | None = None
    every: int | None = None
    tz: str = "UTC"  # cron only: the zone its wall-clock fields are read in

    @classmethod
    def parse(cls, cron: str | None = None, every: Any = None, tz: Any = None) -> Schedule:
        if (cron is None) == (every is None):
            raise ScheduleError("give a cron expression or every=..., exactly one of them")
        if every is not None:
            if tz is not None and zone_name(tz) != "UTC":
                raise ScheduleError("tz applies to cron schedules only; every=... counts from the epoch")
            return cls(every=parse_every(every))
        from croniter import croniter  # here: a worker without cron entries never loads it (~1 MB)

        if not isinstance(cron, str) or not croniter.is_valid(cron, second_at_beginning=True):
            raise ScheduleError(f"{cron!r} is not a cron expression (minute hour day month weekday, "
                                "with an optional seconds field in front)")
        if len(cron.split()) > 6:
            raise ScheduleError(f"{cron!r} has more than six fields (a year field is not supported)")
        schedule = cls(cron=" ".join(cron.split()), tz=zone_name(tz))
        try:
            schedule.next_after(time.time())
        except ValueError:  # croniter's CroniterBadDateError: no match within its search limit
            raise ScheduleError(f"{cron!r} never fires") from None
        return schedule

    @property
    def text(self) -> str:
        """How people read it: `*/5 * * * *`, `0 9 * * 1 Europe/Paris`, `every 30s`."""
        if self.every is not None:
            return f"every {format_seconds(self.every)}"
        return f"{self.cron}" + ("" if self.tz == "UTC" else f" {self.tz}")

    def next_after(self, t: float) -> float:
        """The first tick strictly after epoch time `t`."""
        if self.every is not None:
            return float((math.floor(t / self.every) + 1) * self.every)
        return float(self._walk(math.floor(t)).get_next(float))

    def latest_at(self, t: float) -> float:
        """The newest tick at or before epoch time `t`."""
        if self.every is not None:
            return float(math.floor(t / self.every) * self.every)
        return float(self._walk(math.floor(t) + 1).get_prev(float))  # get_prev is strictly before

    def _walk(self, start: int) -> croniter:
        from croniter import croniter

        return croniter(str(self.cron), datetime.fromtimestamp(start, ZoneInfo(self.tz)), second_at_beginning=True)

    # -- stored in Redis, so a process that did not register the entry can still read it ---------
    def fields(self) -> dict[str, str]:
        return {"cron": self.cron or "", "every": str(self.every or ""), "tz": self.tz}

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Schedule:
        every = fields.get("every") or None
        return cls.parse(cron=fields.get("cron") or None, every=int(every) if every else None,
                         tz=fields.get("tz") or None)
