"""A group's limits (`group_concurrency`, `group_rate`, `group_weight`): those of its jobs'
latest push, and an operator's overrides, which win over them until removed.

Both live in one field of `B:limits` (group -> value), so staging and a job's end read a group's
limits with one HGET, overrides or not:

    "<concurrency> <rate count> <rate ms>[ <weight>]"             the latest push's (0: none; weight 1 unsaid)
    "<the push's>;<concurrency> <rate count> <rate ms> <weight>"  with an operator's overrides,
                                                                  each a number or '-' (not overridden)

An override of concurrency 0 or a rate count 0 lifts that limit whatever the jobs say. A push
rewrites only its part, and a push without limits ("0 0 0") stores no part: a group with neither
limits nor overrides has no field, so its jobs' ends have nothing to forget nor a slot to wake a
held group for (`lane_done`). A group whose jobs are all done keeps only the overrides (";..."),
so an override lives until it is removed (`api.groups.clear_group_limits`), as a pause does; the
field goes once neither part is left. `LIMITS_LUA` holds the same rules for the scripts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidequest.jobs.options import (
    MAX_GROUP_WEIGHT,
    MAX_LANE_COUNT,
    MAX_RATE_SECONDS,
    group_concurrency_of,
    group_rate_of,
    group_weight_of,
)

log = logging.getLogger(__name__)

NAMES = ("concurrency", "rate", "weight")  # what an operator may override


@dataclass(frozen=True)
class Limits:
    """A group's limits as staging applies them: its overrides over its latest push's."""

    concurrency: int | None = None  # at most this many staged or running at once
    rate: tuple[int, float] | None = None  # (count, seconds): at most count staged per seconds
    weight: int = 1  # its share of its level's turns
    overridden: tuple[str, ...] = ()  # which of them an operator set (`NAMES`)


def limits_of(payload: Mapping[str, Any]) -> str:
    """The push's part of `B:limits` for a grouped payload. A value a push would refuse
    (`options.group_rate_of`, ...), as a payload from elsewhere may bring, is that job's to lose:
    the limit is ignored, with one log line."""
    concurrency, rate, weight = (payload.get(name) for name in ("group_concurrency", "group_rate", "group_weight"))
    checked = (group_concurrency_of(concurrency), group_rate_of(rate), group_weight_of(weight))
    for option, value, ok in zip(("group_concurrency", "group_rate", "group_weight"), (concurrency, rate, weight),
                                 checked, strict=True):
        if value is not None and ok is None:
            log.warning("job %s: its %s %r is not valid (see the job options); its group gets none",
                        payload.get("jid"), option, value)
    count, ms = (checked[1][0], max(int(checked[1][1] * 1000), 1)) if checked[1] else (0, 0)
    pushed = f"{checked[0] or 0} {count} {ms}"
    return pushed if (checked[2] or 1) == 1 else f"{pushed} {checked[2]}"


def override_args(concurrency: int | None, rate: tuple[int, float] | int | None, weight: int | None,
                  removed: tuple[str, ...] = ()) -> list[str]:
    """SET_GROUP_LIMITS' arguments: per override field its new value, '-' to remove it, '' to keep it."""
    fields = ["", "", "", ""]
    if concurrency is not None:
        fields[0] = str(concurrency)
    if rate is not None:
        fields[1:3] = ["0", "0"] if rate == 0 else [str(rate[0]), str(max(int(rate[1] * 1000), 1))]  # type: ignore[index]
    if weight is not None:
        fields[3] = str(weight)
    for name in removed:
        for i in {"concurrency": (0,), "rate": (1, 2), "weight": (3,)}[name]:
            fields[i] = "-"
    return fields


def parse_limits(stored: str | None) -> Limits:
    """`B:limits`' value read back, as staging applies it (see the module); a part set by hand
    that staging would ignore is ignored here too."""
    pushed, _, over = (stored or "").partition(";")
    parts = pushed.split()
    numbers = [int(p) for p in parts] if len(parts) in (3, 4) and all(p.isdigit() for p in parts) else [0, 0, 0]
    concurrency, count, ms, weight = [*numbers, 1][:4]
    overridden: list[str] = []
    fields = over.split()
    if len(fields) == 4:
        if fields[0].isdigit():
            concurrency, overridden = int(fields[0]), [*overridden, "concurrency"]
        if fields[1].isdigit() and fields[2].isdigit():
            count, ms, overridden = int(fields[1]), int(fields[2]), [*overridden, "rate"]
        if fields[3].isdigit():
            weight, overridden = int(fields[3]), [*overridden, "weight"]
    rate_ok = 0 < count <= MAX_LANE_COUNT and 1 <= ms <= MAX_RATE_SECONDS * 1000
    return Limits(concurrency if 0 < concurrency <= MAX_LANE_COUNT else None, (count, ms / 1000) if rate_ok else None,
                  weight if 1 <= weight <= MAX_GROUP_WEIGHT else 1, tuple(overridden))


# The Lua of the same rules (part of `LANES_LUA`).
LIMITS_LUA = """
local MAX_COUNT, MAX_MS, MAX_WEIGHT, NO_LIMITS = {max_count}, {max_ms}, {max_weight}, '0 0 0'
-- A group's limits from `B:limits` (see `lanes.limits`): concurrency, rate count, rate ms, weight,
-- its overrides over its push's; each 0 (none; weight 1) when absent or out of the bounds a push
-- checks, so PEXPIRE and the comparisons cannot fail.
local function limits_parse(stored)
  if not stored then return 0, 0, 0, 1 end
  local pushed, over = string.match(stored, '^([^;]*);?(.*)$')
  local c, n, ms, w = string.match(pushed, '^(%d+) (%d+) (%d+) ?(%d*)$')
  c, n, ms, w = tonumber(c) or 0, tonumber(n) or 0, tonumber(ms) or 0, tonumber(w) or 1
  local oc, on, oms, ow = string.match(over, '^([%d-]+) ([%d-]+) ([%d-]+) ([%d-]+)$')
  if oc then
    c = tonumber(oc) or c
    if tonumber(on) and tonumber(oms) then n, ms = tonumber(on), tonumber(oms) end
    w = tonumber(ow) or w
  end
  if c > MAX_COUNT then c = 0 end
  if n > MAX_COUNT or ms < 1 or ms > MAX_MS then n, ms = 0, 0 end
  if w < 1 or w > MAX_WEIGHT then w = 1 end
  return c, n, ms, w
end
local function lane_limits(base, group)
  return limits_parse(redis.call('hget', base .. ':limits', group))
end
-- The operator's part of a stored value ('' for none).
local function limits_over(stored)
  return stored and string.match(stored, ';(.*)$') or ''
end
-- A group whose jobs are all done forgets its push's limits and keeps an operator's overrides.
local function limits_forget(base, group, stored)
  local over = limits_over(stored)
  if over == '' then redis.call('hdel', base .. ':limits', group)
  else redis.call('hset', base .. ':limits', group, ';' .. over) end
end
""".replace("{max_count}", str(MAX_LANE_COUNT)).replace("{max_ms}", str(MAX_RATE_SECONDS * 1000)).replace(
    "{max_weight}", str(MAX_GROUP_WEIGHT))
