"""The Lua scripts that need atomicity, each with the keys it touches.

Payload rewriting is done in Python before a script runs (Lua's cjson would reformat floats
and reorder fields); the scripts only move bytes, and each checks that the job is still where
it was expected, so two processes racing on the same job cannot both move it.
"""

from __future__ import annotations

from typing import Any

import redis

from . import keys

# KEYS: sidequest:reserved:<identity>, queue:<q>   ARGV: job
# Put a reserved job back at the head (consuming end) of its queue, unchanged.
REQUEUE = """
if redis.call('lrem', KEYS[1], -1, ARGV[1]) > 0 then
  redis.call('rpush', KEYS[2], ARGV[1])
  return 1
end
return 0
"""

# KEYS: sidequest:reserved:<identity>, <identity>, queue:<q> or dead, queues
# ARGV: job as reserved, job to write, "queue" | "dead", queue name, score (dead)
# Recover one job of a dead process: only if that process is still silent, and only once.
RECOVER = """
if redis.call('exists', KEYS[2]) == 1 then
  return -1
end
if redis.call('lrem', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
if ARGV[3] == 'queue' then
  redis.call('sadd', KEYS[4], ARGV[4])
  redis.call('rpush', KEYS[3], ARGV[2])
else
  redis.call('zadd', KEYS[3], ARGV[5], ARGV[2])
end
return 1
"""

# KEYS: schedule|retry, queue:<q>, queues   ARGV: job as scheduled, job to enqueue, queue name
# Move one due job from a sorted set to its queue; a no-op if another poller got it first.
ENQUEUE_DUE = """
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  redis.call('sadd', KEYS[3], ARGV[3])
  redis.call('lpush', KEYS[2], ARGV[2])
  return 1
end
return 0
"""


# The task library, shared by the task scripts and by reserve/ack (which record a task job's
# working/finished in the same call that takes/acknowledges it). A task's keys (keys.task_keys)
# are a table K: hash, events hash, order zset, then the status zsets in keys.TASK_STATUSES
# order; `task_keys(id)` builds the same names from keys' prefix. When a sealed task has every
# job finished, failed or error, it is marked complete exactly once (scripts run atomically, so
# only one caller sees this), its callbacks (payloads built at creation, enqueued_at appended
# now; no cjson, so the JSON stays as the client wrote it) are pushed onto their queues, and
# every key of the task is set to expire after the retention time.
_TASK_LIB = """
local STATUSES = {'enqueued', 'working', 'finished', 'failed', 'error'}
local function task_keys(id)
  local base = '%(task_prefix)s' .. id
  local k = {base}
  for _, suffix in ipairs({%(suffixes)s}) do k[#k + 1] = base .. suffix end
  return k
end
local function index_key(K, status)
  for i, s in ipairs(STATUSES) do if s == status then return K[3 + i] end end
end
local function complete_if_done(K, now, retention)
  local t = redis.call('hmget', K[1], 'sealed', 'total', 'count:finished', 'count:failed',
                       'count:error', 'completed_at')
  if t[1] ~= '1' or t[6] then return 0 end
  local finished = tonumber(t[3] or '0')
  if finished + tonumber(t[4] or '0') + tonumber(t[5] or '0') < tonumber(t[2] or '0') then return 0 end
  redis.call('hset', K[1], 'completed_at', now)
  local names = {'on_complete'}
  if finished == tonumber(t[2]) then names[2] = 'on_success' end
  for _, name in ipairs(names) do
    local cb = redis.call('hmget', K[1], name, name .. ':queue')
    if cb[1] then
      redis.call('sadd', '%(queues)s', cb[2])
      redis.call('lpush', '%(queue_prefix)s' .. cb[2], cb[1] .. ',"enqueued_at":' .. now .. '}')
    end
  end
  for i = 1, #K do redis.call('expire', K[i], retention) end
  return 1
end
-- Move the event of `jid` to `new` ('' keeps it), set `fields`, append `message` ('' for none).
-- Returns {changed, completed}; a jid the task does not know is left alone.
local function transition(K, jid, new, now, message, fields, retention)
  local raw = redis.call('hget', K[2], jid)
  if not raw then return {0, 0} end
  local event = cjson.decode(raw)
  local old = event['status']
  if new == '' then new = old end
  for k, v in pairs(fields) do event[k] = v end
  if message ~= '' then
    if type(event['messages']) ~= 'table' or next(event['messages']) == nil then event['messages'] = {} end
    table.insert(event['messages'], {at = tonumber(now), text = message})
  end
  event['status'] = new
  redis.call('hset', K[2], jid, cjson.encode(event))
  local changed = 0
  if new ~= old then
    redis.call('hincrby', K[1], 'count:' .. old, -1)
    redis.call('hincrby', K[1], 'count:' .. new, 1)
    redis.call('zrem', index_key(K, old), jid)
    redis.call('zadd', index_key(K, new), redis.call('zscore', K[3], jid) or 0, jid)
    changed = 1
  end
  return {changed, complete_if_done(K, now, retention)}
end
-- A finished job leaves the reserved list; a task job's event becomes finished with it.
local function acknowledge(reserved, job, task_id, jid, now, retention)
  redis.call('lrem', reserved, -1, job)
  if task_id ~= '' then
    transition(task_keys(task_id), jid, 'finished', now, 'finished', {finished_at = tonumber(now)}, retention)
  end
end
""" % {"queues": keys.QUEUES, "queue_prefix": keys.QUEUE_PREFIX, "task_prefix": keys.task(""),
       "suffixes": ", ".join(f"'{suffix}'" for suffix in keys.task_key_suffixes())}

# KEYS: the task's keys (keys.task_keys)
# ARGV: jid, new status ('' keeps it), now, message ('' for none), JSON of fields, retention
TASK_TRANSITION = _TASK_LIB + """
return transition(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], cjson.decode(ARGV[5]), tonumber(ARGV[6]))
"""

# KEYS: the task's keys   ARGV: now, retention. Seal the task (no more jobs); it may complete at once.
TASK_SEAL = _TASK_LIB + """
redis.call('hset', KEYS[1], 'sealed', '1')
return complete_if_done(KEYS, ARGV[1], tonumber(ARGV[2]))
"""

# KEYS: sidequest:reserved:<identity>   ARGV: job, task id or '', jid, now, retention
ACKNOWLEDGE = _TASK_LIB + """
acknowledge(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]))
return 1
"""


# KEYS: queue:<q>... (in fetch order), sidequest:reserved:<identity>
# ARGV: previous job to acknowledge or '', its task id or '', its jid, now, retention
# Acknowledge this processor's previous job (if any), then take the oldest job of the first
# non-empty queue into the reserved list, and if it belongs to a task, mark its event working.
# Returns {queue key, job, 1 if a task event was marked}. One round trip per job on a busy
# worker, task bookkeeping included.
RESERVE = _TASK_LIB + """
local reserved = KEYS[#KEYS]
if ARGV[1] ~= '' then acknowledge(reserved, ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])) end
for i = 1, #KEYS - 1 do
  local job = redis.call('rpop', KEYS[i])
  if job then
    redis.call('lpush', reserved, job)
    local marked = 0
    local task_id = string.match(job, '"task_id":"(%x+)"')
    if task_id then
      local jid = string.match(job, '"jid":"(%x+)"')
      if jid then
        transition(task_keys(task_id), jid, 'working', ARGV[4], 'working',
                   {started_at = tonumber(ARGV[4])}, tonumber(ARGV[5]))
        marked = 1
      end
    end
    return {KEYS[i], job, marked}
  end
end
return false
"""


class Scripts:
    """The scripts registered on one Redis client (EVALSHA, loading them again when flushed)."""

    def __init__(self, client: redis.Redis) -> None:
        self.reserve = client.register_script(RESERVE)
        self.requeue = client.register_script(REQUEUE)
        self.recover = client.register_script(RECOVER)
        self.enqueue_due = client.register_script(ENQUEUE_DUE)
        self.task_transition = client.register_script(TASK_TRANSITION)
        self.task_seal = client.register_script(TASK_SEAL)
        self.acknowledge = client.register_script(ACKNOWLEDGE)

    @staticmethod
    def call(script: Any, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return script(keys=keys, args=args, client=client)
