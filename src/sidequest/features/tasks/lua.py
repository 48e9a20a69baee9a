"""The tasks' Lua: the library every task script shares, the lifecycle operation that keeps a
task job's event current inside the core's move (`TASK_FEATURE`), and the two scripts a task
runs on its own: `TASK_TRANSITION` (`task_message` from inside a job) and `TASK_SEAL`.

Each comes in Cluster mode's form too (`cluster_lua`): there a task lives in its queues' slot
(its id begins with their hash tag, see `Task.create`), so its callbacks are pushed onto
`queue:{<q>}` (or a grouped queue's `queue:{<group>}<name>`), and the queue's name, in `queues`
since the task was created, is not added again.
"""

from sidequest.store import keys

# The task library: a task's keys (keys.task_keys) are a table K: hash, events hash, order zset,
# then the status zsets in keys.TASK_STATUSES order; `task_keys(id)` builds the same names from
# keys' prefix. When a sealed task has every job finished, failed or error, it
# is marked complete exactly once (scripts run atomically, so only one caller sees this), its
# callbacks (payloads built at creation, enqueued_at appended now; no cjson, so the JSON stays as
# the client wrote it) are pushed onto their queues, and every key of the task is set to expire
# after the retention time. Until then every change sets every key of the task to expire `ttl`
# seconds later (never sooner than the hash would: `Task.add` may have made room for a job
# scheduled far ahead), so an abandoned task goes away, and a key a change creates (a status
# zset emptied and filled again) expires with the others.
TASK_LIB = """
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
      %(register)s
      redis.call('lpush', %(callback_queue)s, cb[1] .. ',"enqueued_at":' .. now .. '}')
    end
  end
  for i = 1, #K do redis.call('expire', K[i], retention) end
  return 1
end
-- After a change that did not complete the task: every key expires `ttl` s from now (`retention`
-- once it has completed), or later if the hash already would.
local function keep(K, ttl, retention)
  if redis.call('hexists', K[1], 'completed_at') == 1 then ttl = retention end
  local left = redis.call('ttl', K[1])
  if left > ttl then ttl = left end
  for i = 1, #K do redis.call('expire', K[i], ttl) end
end
local function after_change(K, now, retention, ttl)
  local completed = complete_if_done(K, now, retention)
  if completed == 0 then keep(K, ttl, retention) end
  return completed
end
-- Move the event of `jid` to `new` ('' keeps it), set `fields`, append `message` ('' for none).
-- Returns {changed, completed}; a jid the task does not know is left alone.
local function transition(K, jid, new, now, message, fields, retention, ttl)
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
  return {changed, after_change(K, now, retention, ttl)}
end
"""
_SIDEKIQ = {"register": f"redis.call('sadd', '{keys.QUEUES}', cb[2])",
            "callback_queue": f"'{keys.QUEUE_PREFIX}' .. cb[2]"}
# a queue of a group (`{media}resize`) carries its tag; any other gets its name as its tag
_TAGGED = "(string.sub(cb[2], 1, 1) == '{' and cb[2] or '{' .. cb[2] .. '}')"
_CLUSTER = {"register": "", "callback_queue": f"'{keys.QUEUE_PREFIX}' .. {_TAGGED}"}
_NAMES = {"task_prefix": keys.task(""), "suffixes": ", ".join(f"'{suffix}'" for suffix in keys.task_key_suffixes())}
_TEMPLATE = TASK_LIB
TASK_LIB = _TEMPLATE % {**_NAMES, **_SIDEKIQ}

# The task feature's lifecycle operation: args task id, jid, status, message, fields JSON,
# retention, ttl.
TASK_FEATURE = TASK_LIB + """
FEATURES['task'] = function(point, now, a)
  transition(task_keys(a[1]), a[2], a[3], now, a[4], cjson.decode(a[5]), tonumber(a[6]), tonumber(a[7]))
end
"""

# KEYS: the task's keys   ARGV: jid, new status ('' keeps it), now, message, fields JSON, retention, ttl
TASK_TRANSITION = TASK_LIB + """
return transition(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], cjson.decode(ARGV[5]), tonumber(ARGV[6]),
                  tonumber(ARGV[7]))
"""

# KEYS: the task's keys   ARGV: now, retention, ttl. Seal the task (no more jobs); it may complete at once.
TASK_SEAL = TASK_LIB + """
if redis.call('exists', KEYS[1]) == 0 then return -1 end
redis.call('hset', KEYS[1], 'sealed', '1')
return after_change(KEYS, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
"""


def cluster_lua(script: str) -> str:
    """`script` (one of the above) in Cluster mode's form (see module)."""
    return script.replace(TASK_LIB, _TEMPLATE % {**_NAMES, **_CLUSTER}, 1)
