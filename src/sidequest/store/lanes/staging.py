"""Staging's Lua (see `lanes` for the layout and the rules): a group's turn (`lane_open`, whether it
may stage now, else when to look at it again), counting a staged job against its group
(`lane_count`), the held groups that are due (`lane_due`), a weighted group's run of turns, one
level's turns (`lane_take`) and a whole staging call (`stage`), with the bounds that keep a call's
work constant whatever the number of groups. `lanes.lua` adds the push's, the end's and the wake's
functions to it (`LANES_LUA`); `lanes.lua`'s docstring holds the rules every script follows.
"""

from __future__ import annotations

LANE_DEPTH = 32  # laned jobs staged into a queue at once (the fairness grain)
LANE_REFILL = LANE_DEPTH // 2  # a laned job's end stages more once the queue holds fewer than this
DEFAULT_LEVEL = 5  # a job with a group and no priority; above it: staged at the head
HEAD_TTL_MS = 3_600_000  # `B:head` outlives its batch an hour at most (untaken that long: no one works the queue)
HELD_GRAIN = 2 * LANE_DEPTH  # held groups of a level one staging call moves back to their turns at most
TURN_SLACK = 2 * LANE_DEPTH  # turns one staging call takes beyond its budget of jobs at most (groups parked)
RECHECK_MS = 60_000  # a group whose keys were set by hand (of another type) is looked at again this late

# Paths under B are built by suffix here, as `LaneKeys` builds them.
STAGING_LUA = """
local LANE_DEPTH, LANE_HIGH, HEAD_TTL, LANE_REFILL = {depth}, {default}, {head_ttl}, {refill}
local HELD_GRAIN, TURN_SLACK, RECHECK_MS, HELD_EVENT = {held_grain}, {turn_slack}, {recheck}, 'inf'
local function typed(key, kind)
  local found = redis.call('type', key)['ok']
  return found == 'none' or found == kind
end
-- When a group held back by its rate may stage again: its window's end (ms, from `now`).
local function window_end(base, group, ms, now)
  local left = redis.call('pttl', base .. ':rate:' .. group)
  return now + ((left >= 0) and left or ms)  -- a count without expiry (set by hand): a window on
end
-- A group's turn at `level`: how many jobs wait in its lane, whether it may stage one more now,
-- and then its limits and counts (`g`: to count the job and to tell whether it is held after it),
-- else when to look at it again (a time in ms, or HELD_EVENT: until `lane_wake`). It reads every
-- key a staging of the group then writes (its lane, its running set, its rate count) and errors if
-- one cannot take that write; the caller runs it under pcall and parks the group for RECHECK_MS.
-- When the group may stage, its last step is its first write: the job leaves its waiting count
-- (HINCRBY, which errors on a count set by hand having written nothing), so a group that errors
-- has nothing of it written. `paused`: whether `B:paused` exists.
local function lane_open(base, level, group, paused, now)
  local waiting = redis.call('llen', base .. ':' .. level .. ':' .. group)
  if waiting == 0 then return waiting, true, nil end
  local g = nil
  if group ~= '' then
    if paused and redis.call('sismember', base .. ':paused', group) == 1 then return waiting, false, HELD_EVENT end
    g = {}
    g.concurrency, g.count, g.ms, g.weight = lane_limits(base, group)
    g.running = redis.call('scard', base .. ':running:' .. group)  -- its type, and a slot's count
    if g.concurrency > 0 and g.running >= g.concurrency then return waiting, false, HELD_EVENT end
    if g.count > 0 then  -- a group without a rate never reads (nor writes) a rate count
      local used = redis.call('get', base .. ':rate:' .. group)
      if used and not string.match(used, '^%d+$') then
        error('the rate count of group ' .. group .. ' is not a number')
      end
      g.used = tonumber(used or '0')
      if g.used >= g.count then return waiting, false, window_end(base, group, g.ms, now) end
    end
  end
  local waiting_key = base .. ':waiting'
  if redis.call('hincrby', waiting_key, group, -1) <= 0 then redis.call('hdel', waiting_key, group) end
  return waiting, true, g
end
-- A staged job's jid, from its JSON (never by pattern over its text: an argument may hold a
-- "jid" too); nil for a payload without one, which is then staged without a slot.
local function job_jid(job)
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == 'table' and type(decoded['jid']) == 'string' then return decoded['jid'] end
  return nil
end
-- Count a staged job against its group (`g` from `lane_open`); returns when the group may stage
-- again if this job used its last slot or its rate (it is parked), else nil.
local function lane_count(base, group, job, g, now)
  local jid = job_jid(job)
  if jid then
    redis.call('sadd', base .. ':running:' .. group, jid)
    if g.running == 0 then redis.call('sadd', base .. ':busy', group) end  -- a running set's group is busy
    g.running = g.running + 1
  end
  if g.count > 0 then
    g.used = redis.call('incr', base .. ':rate:' .. group)
    if g.used == 1 then redis.call('pexpire', base .. ':rate:' .. group, g.ms) end
  end
  if g.concurrency > 0 and g.running >= g.concurrency then return HELD_EVENT end
  if g.count > 0 and g.used >= g.count then
    return g.used == 1 and now + g.ms or window_end(base, group, g.ms, now)
  end
  return nil
end
-- The held groups of a level whose time has come (a rate window's end) take turns again, at the
-- tail of the rotation: at most HELD_GRAIN a call.
local function lane_due(base, level, now)
  local held = base .. ':held:' .. level
  local due = redis.call('zrangebyscore', held, '-inf', now, 'LIMIT', 0, HELD_GRAIN)
  if #due > 0 then
    redis.call('rpush', base .. ':' .. level, unpack(due))
    redis.call('zrem', held, unpack(due))
  end
end
-- A weighted group's run of turns (`group_weight`): the group at the head of the rotation and how
-- many jobs it staged in a row, kept in `B:streak:<level>` ("<n> <group>") between calls, since a
-- call's budget may end a run half-way; nil, 0 for none.
local function streak_read(key)
  local kept = redis.call('get', key)
  if not kept then return nil, 0, false end
  local n, group = string.match(kept, '^(%d+) (.*)$')
  return group, tonumber(n) or 0, true
end
local function streak_keep(key, group, n, kept)
  if group then redis.call('set', key, n .. ' ' .. group, 'PX', HEAD_TTL)
  elseif kept then redis.call('del', key) end
end
-- Move up to `budget` jobs of one level into `out`, the level's groups taking turns (a turn:
-- LMOVE from the rotation's head to its tail). A group of weight w takes w turns in a row (moved
-- back to the head after each of its first w - 1), so over a pass of the rotation each group
-- stages its weight's share, at one more LMOVE per extra turn. A group that may not stage now,
-- or that used its last slot or its rate with the job it staged, leaves the rotation for
-- `B:held:<level>` (RPOP: it is the tail), so no call passes over it again until it is due or
-- woken (`lane_wake`). Returns whether the level is exhausted (its rotation is empty): only then
-- may a lower level stage, so a group held back never lets a lower level's job ahead of the open
-- groups of this one. Every turn stages a job or takes a group out of the rotation, and the turns
-- of a call are bounded by a constant (`budget` + TURN_SLACK), whatever the number of groups; a
-- level cut short by that bound is not exhausted.
local function lane_take(base, level, budget, out, now, paused)
  local rotation, streak_key = base .. ':' .. level, base .. ':streak:' .. level
  lane_due(base, level, now)
  local turns = 0
  local run, streak, kept = streak_read(streak_key)
  while #out < budget and turns < budget + TURN_SLACK do
    turns = turns + 1
    local group = redis.call('lmove', rotation, rotation, 'LEFT', 'RIGHT')
    if not group then break end
    if group ~= run then run, streak = group, 0 end
    local checked, waiting, open, g = pcall(lane_open, base, level, group, paused, now)
    local leaves, at = true, nil
    if not checked then
      redis.log(redis.LOG_WARNING, 'sidequest: lanes ' .. base .. ': ' .. tostring(waiting))
      at = now + RECHECK_MS
    elseif not open then
      at = g
    elseif waiting > 0 then  -- counted out of `B:waiting` already (`lane_open`)
      local job = redis.call('rpop', rotation .. ':' .. group)
      out[#out + 1], streak = job, streak + 1
      if group ~= '' then at = lane_count(base, group, job, g, now) end
      if waiting == 1 then at = nil else leaves = at ~= nil end  -- an emptied lane leaves its turn for good
    end
    if leaves then
      redis.call('rpop', rotation)
      run = nil
    elseif g and streak < g.weight then redis.call('lmove', rotation, rotation, 'RIGHT', 'LEFT')  -- its next turn
    else run = nil end
    if at then redis.call('zadd', base .. ':held:' .. level, at, group) end
  end
  streak_keep(streak_key, run, streak, kept)
  local left = redis.call('llen', rotation)
  if left == 0 and redis.call('zcard', base .. ':held:' .. level) == 0 then redis.call('srem', base, level) end
  return left == 0
end
-- The queue's keys that staging writes are of their types (a key set by hand is not): then what
-- a call starts from (`q`: the levels, sorted highest first; the queue's length; the job at the
-- head; whether any group is paused), else nil. A key staging reads anyway is checked by that read
-- (under pcall: an error is its wrong type), the others by TYPE.
local function stage_levels(base, queue)
  local q = {}
  local ok_levels, levels = pcall(redis.call, 'smembers', base)
  local ok_queue, queued = pcall(redis.call, 'llen', queue)
  local ok_head, head = pcall(redis.call, 'get', base .. ':head')
  local paused = redis.call('type', base .. ':paused')['ok']
  if not (ok_levels and ok_queue and ok_head) or (paused ~= 'none' and paused ~= 'set') then return nil end
  for _, level in ipairs(levels) do
    if not string.match(level, '^%d$') or not typed(base .. ':' .. level, 'list')
       or not typed(base .. ':held:' .. level, 'zset') or not typed(base .. ':streak:' .. level, 'string') then
      return nil
    end
  end
  for suffix, kind in pairs({busy = 'set', waiting = 'hash', limits = 'hash'}) do
    if not typed(base .. ':' .. suffix, kind) then return nil end
  end
  table.sort(levels, function(a, b) return tonumber(a) > tonumber(b) end)
  q.levels, q.queued, q.head, q.paused = levels, queued, head, paused == 'set'
  return q
end
-- Whether a batch may go to the queue's head: the last one's deepest job (`B:head`, deleted when
-- a worker takes it: `lane_taken`) is gone from the queue.
local function head_free(base, queue, q)
  if not q.head then return true end
  if redis.call('lpos', queue, q.head, 'RANK', -1, 'MAXLEN', LANE_DEPTH * 4) then return false end
  if q.queued > LANE_DEPTH * 4 then
    return false  -- deeper than a bounded look (put-backs went ahead of it): its take will tell
  end
  redis.call('del', base .. ':head')  -- gone without a take sidequest saw (Ruby, a hand LREM)
  return true
end
-- Stage the lanes of the queue whose list is `queue` (see `lanes`); returns how many jobs moved,
-- or -1 when a key of the queue's lanes is of the wrong type (nothing moved).
local function stage(base, queue)
  local q = stage_levels(base, queue)
  if not q then return -1 end
  if #q.levels == 0 then return 0 end
  local free = head_free(base, queue, q)
  local room, high, staged = LANE_DEPTH - q.queued, {}, 0
  local clock = redis.call('time')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  for _, level in ipairs(q.levels) do
    local exhausted = true
    if tonumber(level) > LANE_HIGH then
      if free then exhausted = lane_take(base, level, LANE_DEPTH, high, now, q.paused) end
    elseif room > 0 then
      local low = {}
      exhausted = lane_take(base, level, room, low, now, q.paused)
      if #low > 0 then redis.call('lpush', queue, unpack(low)) end
      room, staged = room - #low, staged + #low
    end
    if not exhausted then break end  -- this level still has jobs that may go: none of a lower one first
  end
  if #high > 0 then  -- the first taken ends at the head: it runs first
    local reversed = {}
    for i = #high, 1, -1 do reversed[#reversed + 1] = high[i] end
    redis.call('rpush', queue, unpack(reversed))
    redis.call('set', base .. ':head', high[#high], 'PX', HEAD_TTL)
  end
  return staged + #high
end
"""
for _name, _value in (("held_grain", HELD_GRAIN), ("turn_slack", TURN_SLACK), ("recheck", RECHECK_MS),
                      ("depth", LANE_DEPTH), ("default", DEFAULT_LEVEL), ("head_ttl", HEAD_TTL_MS),
                      ("refill", LANE_REFILL)):
    STAGING_LUA = STAGING_LUA.replace("{" + _name + "}", str(_value))

