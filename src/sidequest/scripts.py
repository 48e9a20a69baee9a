"""The Lua scripts that need atomicity, each with the keys it touches.

Payload rewriting is done in Python before a script runs (Lua's cjson would reformat floats
and reorder fields); the scripts only move bytes, and each checks that the job is still where
it was expected, so two processes racing on the same job cannot both move it.
"""

from __future__ import annotations

from typing import Any

import redis

from . import keys

# KEYS: queue:<q>... (in fetch order), sidequest:reserved:<identity>   ARGV: job to acknowledge or ''
# Acknowledge the previous job of this processor (if any), then take the oldest job of the
# first non-empty queue into the reserved list; return {queue key, job}. Folding the previous
# acknowledgement in saves a round trip per job on a busy worker.
RESERVE = """
if ARGV[1] ~= '' then redis.call('lrem', KEYS[#KEYS], -1, ARGV[1]) end
for i = 1, #KEYS - 1 do
  local job = redis.call('rpop', KEYS[i])
  if job then
    redis.call('lpush', KEYS[#KEYS], job)
    return {KEYS[i], job}
  end
end
return false
"""

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


# Shared by the task scripts. KEYS: task hash, events hash, order zset, then the status zsets
# in keys.TASK_STATUSES order. When a sealed task has every job finished, failed or error, mark
# it complete exactly once (the script runs atomically, so only one caller sees this), push its
# callbacks (payloads built at creation, enqueued_at appended now; no cjson, so the JSON
# stays exactly as the client wrote it) onto
# `<queue prefix><queue>`, and let every key of the task expire after the retention time.
_TASK_COMMON = """
local STATUSES = {'enqueued', 'working', 'finished', 'failed', 'error'}
local function index_key(status)
  for i, s in ipairs(STATUSES) do if s == status then return KEYS[3 + i] end end
end
local function complete_if_done(now, retention)
  local t = redis.call('hmget', KEYS[1], 'sealed', 'total', 'count:finished', 'count:failed',
                       'count:error', 'completed_at')
  if t[1] ~= '1' or t[6] then return 0 end
  local finished = tonumber(t[3] or '0')
  if finished + tonumber(t[4] or '0') + tonumber(t[5] or '0') < tonumber(t[2] or '0') then return 0 end
  redis.call('hset', KEYS[1], 'completed_at', now)
  local names = {'on_complete'}
  if finished == tonumber(t[2]) then names[2] = 'on_success' end
  for _, name in ipairs(names) do
    -- the template is the payload's JSON without its closing brace; only enqueued_at is added
    local cb = redis.call('hmget', KEYS[1], name, name .. ':queue')
    if cb[1] then
      redis.call('sadd', '%(queues)s', cb[2])
      redis.call('lpush', '%(queue_prefix)s' .. cb[2], cb[1] .. ',"enqueued_at":' .. now .. '}')
    end
  end
  for i = 1, #KEYS do redis.call('expire', KEYS[i], retention) end
  return 1
end
""" % {"queues": keys.QUEUES, "queue_prefix": keys.QUEUE_PREFIX}

# ARGV: jid, new status ('' keeps it), now, message ('' for none), JSON of fields to set, retention
# Returns {changed (0/1), completed (0/1)}; a jid the task does not know is left alone.
TASK_TRANSITION = _TASK_COMMON + """
local raw = redis.call('hget', KEYS[2], ARGV[1])
if not raw then return {0, 0} end
local event = cjson.decode(raw)
local old = event['status']
local new = ARGV[2] ~= '' and ARGV[2] or old
for k, v in pairs(cjson.decode(ARGV[5])) do event[k] = v end
if ARGV[4] ~= '' then
  if type(event['messages']) ~= 'table' or next(event['messages']) == nil then event['messages'] = {} end
  table.insert(event['messages'], {at = tonumber(ARGV[3]), text = ARGV[4]})
end
event['status'] = new
redis.call('hset', KEYS[2], ARGV[1], cjson.encode(event))
local changed = 0
if new ~= old then
  redis.call('hincrby', KEYS[1], 'count:' .. old, -1)
  redis.call('hincrby', KEYS[1], 'count:' .. new, 1)
  redis.call('zrem', index_key(old), ARGV[1])
  redis.call('zadd', index_key(new), redis.call('zscore', KEYS[3], ARGV[1]) or 0, ARGV[1])
  changed = 1
end
return {changed, complete_if_done(ARGV[3], tonumber(ARGV[6]))}
"""

# ARGV: now, retention. Seal the task (no more jobs); it may complete at once.
TASK_SEAL = _TASK_COMMON + """
redis.call('hset', KEYS[1], 'sealed', '1')
return complete_if_done(ARGV[1], tonumber(ARGV[2]))
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

    @staticmethod
    def call(script: Any, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return script(keys=keys, args=args, client=client)
