"""The lanes' scripts that an operator's action runs (`api.groups`, a cancel) and the slots'
give-back (`lanes.slots`): ADMIN_DELETE_LANED, CLEAR_LANES, RELEASE_SLOTS, RESET_GROUP,
RESUME_GROUP. Each is built on the lanes' shared functions (`lanes.lua.LANES_LUA`) and follows its
rules: inputs and key types checked before the first write, every call's work bounded.
"""

from __future__ import annotations

from sidequest.store.lanes.lua import LANES_LUA

CLEAR_GRAIN = 100  # lanes one CLEAR_LANES call deletes at most (a call's work is bounded)

# KEYS: a lane's list (`lanes`)   ARGV: entry, the queue's lanes base, level, group, now, point, ops...
# Registered after `scripts.core_lib` (it runs the lifecycle's operations). Delete (cancel) a laned
# job still waiting in its lane: remove one copy, and keep the lanes' counts and turns true
# (`lane_removed`).
ADMIN_DELETE_LANED = """
if not (typed(ARGV[2] .. ':' .. ARGV[3], 'list') and typed(ARGV[2] .. ':held:' .. ARGV[3], 'zset')
        and typed(ARGV[2] .. ':waiting', 'hash') and typed(ARGV[2], 'set')) then
  return redis.error_reply('a key of the lanes ' .. ARGV[2] .. ' is of the wrong type: nothing deleted')
end
if redis.call('lrem', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
lane_removed(ARGV[2], ARGV[3], ARGV[4])
run_ops(ARGV, 7, ARGV[6], ARGV[5])
return answer(1)
"""

# An operator's clear (`api.groups.clear_lanes`), a grain at a time: KEYS[1] = B. Deletes up to
# CLEAR_GRAIN lanes (B:<level>:<group>, each with its turn in B:<level> and its count in
# B:waiting), the highest level first; once no level is left, B:waiting and B:head. A lane that
# a push starts meanwhile gets its turn as any new lane does, so none is left unnamed between
# calls. What belongs to jobs already staged or running stays theirs: B:running:<group> and
# B:busy (each job's end gives its slot back), B:limits of such a group and B:rate:<group> (a window
# ends by itself); and B:paused: a paused group stays paused. Returns {jobs deleted, 1 if lanes
# are left}.
CLEAR_LANES = LANES_LUA + """
local base, grain, deleted = KEYS[1], {grain}, 0
if not (typed(base, 'set') and typed(base .. ':limits', 'hash') and typed(base .. ':waiting', 'hash')) then
  return redis.error_reply('a key of the lanes ' .. base .. ' is of the wrong type: nothing cleared')
end
local levels = redis.call('smembers', base)
table.sort(levels, function(a, b) return a > b end)
for _, level in ipairs(levels) do
  local rotation, held = base .. ':' .. level, base .. ':held:' .. level
  while grain > 0 do
    local group = redis.call('lpop', rotation)
    if not group then
      group = redis.call('zpopmin', held)[1]  -- then the held groups
      if not group then break end
    end
    local lane = rotation .. ':' .. group
    local n = redis.call('llen', lane)
    redis.call('del', lane)
    if n > 0 and redis.call('hincrby', base .. ':waiting', group, -n) <= 0 then
      redis.call('hdel', base .. ':waiting', group)
    end
    local drained = redis.call('hexists', base .. ':waiting', group) == 0
    if drained and redis.call('scard', base .. ':running:' .. group) == 0 then  -- as `lane_done` forgets
      limits_forget(base, group, redis.call('hget', base .. ':limits', group))
    end
    deleted, grain = deleted + n, grain - 1
  end
  if redis.call('llen', rotation) == 0 and redis.call('zcard', held) == 0 then redis.call('srem', base, level) end
  if grain == 0 then break end
end
if redis.call('scard', base) > 0 then return {deleted, 1} end
redis.call('del', base, base .. ':waiting', base .. ':head')
return {deleted, 0}
""".replace("{grain}", str(CLEAR_GRAIN))

# KEYS: the queue's lanes base B, queue:<q>   ARGV: group, jid...
# Give back slots of one group whose jobs are nowhere (`lanes.slots`): each jid leaves
# B:running:<group> as at its job's end (`lane_done`), then the lanes are staged. Returns how
# many were still held.
RELEASE_SLOTS = LANES_LUA + """
if not typed(KEYS[1] .. ':running:' .. ARGV[1], 'set') or not typed(KEYS[1] .. ':busy', 'set') then
  return redis.error_reply('a key of the lanes ' .. KEYS[1] .. ' is of the wrong type: nothing given back')
end
local released = 0
for i = 2, #ARGV do
  if redis.call('sismember', KEYS[1] .. ':running:' .. ARGV[1], ARGV[i]) == 1 then
    lane_done(KEYS[1], ARGV[1], ARGV[i])
    released = released + 1
  end
end
if released > 0 and redis.call('exists', KEYS[1]) == 1 then stage(KEYS[1], KEYS[2]) end
return released
"""

# KEYS: the queue's lanes base B, queue:<q>   ARGV: group
# An operator's reset of one group (`api.groups.reset_group`): every slot given back (its jobs
# still staged or running no longer count: they run on) and its rate window ended; then the lanes
# are staged. Pause and waiting jobs are untouched. Returns how many slots it held.
RESET_GROUP = LANES_LUA + """
local running = KEYS[1] .. ':running:' .. ARGV[1]
if not (typed(running, 'set') and typed(KEYS[1] .. ':busy', 'set') and typed(KEYS[1] .. ':waiting', 'hash')
        and typed(KEYS[1] .. ':limits', 'hash')) then
  return redis.error_reply('a key of the lanes ' .. KEYS[1] .. ' is of the wrong type: nothing reset')
end
local held = redis.call('scard', running)
redis.call('del', running, KEYS[1] .. ':rate:' .. ARGV[1])
redis.call('srem', KEYS[1] .. ':busy', ARGV[1])
if redis.call('hexists', KEYS[1] .. ':waiting', ARGV[1]) == 0 then
  limits_forget(KEYS[1], ARGV[1], redis.call('hget', KEYS[1] .. ':limits', ARGV[1]))
end
lane_wake(KEYS[1], ARGV[1], false)
if redis.call('exists', KEYS[1]) == 1 then stage(KEYS[1], KEYS[2]) end
return held
"""

# KEYS: the queue's lanes base B, queue:<q>   ARGV: group
# An operator's resume (`api.groups.resume_group`): the group leaves B:paused, takes turns again at
# every level where it was held (`lane_wake`), and the lanes are staged. Returns 1 if it was paused.
RESUME_GROUP = LANES_LUA + """
if not typed(KEYS[1] .. ':paused', 'set') then
  return redis.error_reply('a key of the lanes ' .. KEYS[1] .. ' is of the wrong type: nothing resumed')
end
local was = redis.call('srem', KEYS[1] .. ':paused', ARGV[1])
lane_wake(KEYS[1], ARGV[1], false)
if redis.call('exists', KEYS[1]) == 1 then stage(KEYS[1], KEYS[2]) end
return was
"""

# KEYS: the queue's lanes base B, queue:<q>   ARGV: group, then per override field (concurrency,
# rate count, rate ms, weight) its new value, '-' to remove it or '' to keep it (`limits.override_args`)
# An operator's overrides of a group's limits (`api.groups.set_group_limits`, `clear_group_limits`):
# written beside its push's part of `B:limits` (`lanes.limits`), the group woken at every level
# where it is held (new limits: looked at again), and the lanes staged. Returns its value as stored.
SET_GROUP_LIMITS = LANES_LUA + """
local limits = KEYS[1] .. ':limits'
if not typed(limits, 'hash') then
  return redis.error_reply('a key of the lanes ' .. KEYS[1] .. ' is of the wrong type: nothing set')
end
local stored = redis.call('hget', limits, ARGV[1])
local fields, i = {}, 0
for field in string.gmatch(limits_over(stored), '[^ ]+') do i = i + 1; fields[i] = field end
if i ~= 4 then fields = {'-', '-', '-', '-'} end
for n = 1, 4 do if ARGV[n + 1] ~= '' then fields[n] = ARGV[n + 1] end end
local pushed, over = string.match(stored or '', '^([^;]*)'), table.concat(fields, ' ')
local value = (over == '- - - -') and pushed or pushed .. ';' .. over
if value == '' then redis.call('hdel', limits, ARGV[1]) else redis.call('hset', limits, ARGV[1], value) end
lane_wake(KEYS[1], ARGV[1], false)
if redis.call('exists', KEYS[1]) == 1 then stage(KEYS[1], KEYS[2]) end
return value
"""
