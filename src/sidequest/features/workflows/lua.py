"""The workflows' Lua: the library both scripts share, the lifecycle operation that records a
step's fate and releases its dependents inside the core's move (`WORKFLOW_FEATURE`), and the
cancel of a whole workflow (`WORKFLOW_CANCEL`).

A workflow's keys (`keys.workflow_keys(id)`) are a table K: the hash (name, state, ttl, `count:<s>`
per step status), the graph (step -> its description JSON, fixed at creation: jid, after,
dependents, collect, policy, and the payload of a step not yet pushed, split into its `args` and
the `rest` of its fields), the state (step -> status) and pending (step -> dependencies not yet
resolved). They also read the status records of the steps' jobs (`sidequest:status:<jid>`, built
from keys' prefix), where each step's result is kept: the status feature runs before this one in
the same call, so a step's own result is there when its dependents are released.

In Cluster mode a workflow lives in the slot of its steps' queues, which must be one queue or the
queues of one group (`{media}resize`, see keys.ClusterKeyspace): its id begins with their hash
tag, and its steps' jobs and status records carry it (`cluster_lua`).
"""

from sidequest.store import keys

# Step statuses: waiting (dependencies unresolved), enqueued, running, done, failed, cancelled,
# skipped (never to run: the workflow stopped or was cancelled first).
WORKFLOW_LIB = """
%(names)s
local function wf_set(K, step, new)
  local old = redis.call('hget', K[3], step)
  if old and old ~= new then
    redis.call('hset', K[3], step, new)
    redis.call('hincrby', K[1], 'count:' .. old, -1)
    redis.call('hincrby', K[1], 'count:' .. new, 1)
  end
  return old
end
local function wf_graph(K, step)
  return cjson.decode(redis.call('hget', K[2], step))
end
-- Push a step whose dependencies are all resolved; a mutable step gets their results (JSON from
-- their status records, null when there is none: a failed dependency under "continue") as its
-- first argument, as Celery passes a parent's result: the one result, or the list of them in
-- `after` order.
local function wf_release(K, step, now)
  local g = wf_graph(K, step)
  local args = g['args']
  if g['collect'] ~= 'none' then
    local values = {}
    for i, dep in ipairs(g['after']) do
      values[i] = redis.call('hget', wf_status(wf_graph(K, dep)), 'result') or 'null'
    end
    local passed = values[1]
    if g['collect'] == 'list' then passed = '[' .. table.concat(values, ',') .. ']' end
    if args == '[]' then args = '[' .. passed .. ']' else args = '[' .. passed .. ',' .. string.sub(args, 2) end
  end
  wf_list(g['queue'])
  local payload = '{"args":' .. args .. ',' .. g['rest'] .. ',"enqueued_at":' .. now .. '}'
  redis.call('lpush', wf_queue(g['queue']), payload)
  wf_set(K, step, 'enqueued')
end
-- A step reached an end that lets its dependents go on: each loses one pending dependency, and
-- the one whose count reaches 0 here is pushed (atomically: exactly once).
local function wf_resolve(K, step, now)
  for _, d in ipairs(wf_graph(K, step)['dependents']) do
    if redis.call('hincrby', K[4], d, -1) == 0 and redis.call('hget', K[3], d) == 'waiting' then
      wf_release(K, d, now)
    end
  end
end
-- The waiting steps will never run: skipped, and their jobs' status records say so (cancelled),
-- so a `result()` waiting on one wakes up.
local function wf_skip_waiting(K, now)
  local all = redis.call('hgetall', K[3])
  local keep = tonumber(redis.call('hget', K[1], 'ttl') or '604800') * 1000
  for i = 1, #all, 2 do
    if all[i + 1] == 'waiting' then
      wf_set(K, all[i], 'skipped')
      local record = wf_status(wf_graph(K, all[i]))
      redis.call('del', record, record .. '%(notify_suffix)s')
      redis.call('hset', record, 'state', 'cancelled', 'updated_at', now, 'reason', 'skipped: its workflow stopped')
      redis.call('rpush', record .. '%(notify_suffix)s', '1')
      redis.call('pexpire', record, keep)
      redis.call('pexpire', record .. '%(notify_suffix)s', keep)
    end
  end
end
-- After every change: once no step waits, is enqueued or runs, the workflow has ended (failed if
-- a step failed or was cancelled); every key is kept `ttl` seconds more. A workflow that ended
-- failed only by "continue" steps succeeds once an operator's retries have made them all done,
-- as a Sidekiq batch's success callback fires once its failed jobs succeed on retry.
local function wf_settle(K, now)
  local h = redis.call('hmget', K[1], 'count:waiting', 'count:enqueued', 'count:running', 'count:failed',
                       'count:cancelled', 'state', 'finished_at', 'ttl', 'failed_step')
  local idle = tonumber(h[1] or '0') + tonumber(h[2] or '0') + tonumber(h[3] or '0') == 0
  local failures = tonumber(h[4] or '0') + tonumber(h[5] or '0')
  if idle and not h[7] then
    if h[6] == 'running' then
      local state = 'succeeded'
      if failures > 0 then state = 'failed' end
      redis.call('hset', K[1], 'state', state)
    end
    redis.call('hset', K[1], 'finished_at', now)
  elseif idle and h[6] == 'failed' and not h[9] and failures == 0 then
    redis.call('hset', K[1], 'state', 'succeeded', 'finished_at', now)
  end
  for i = 1, #K do redis.call('expire', K[i], tonumber(h[8] or '604800')) end
end
-- A step's job `jid` reached a point of its life: event running | enqueued | done | failed |
-- cancelled. Only the job the workflow pushed for the step counts: a payload that names the step
-- with another jid (any producer may write one) changes nothing. A step's first end is its one
-- end for the workflow (`ended:<step>` in the hash): its dependents are released, or its failure
-- policy applied, once; an operator's retry of a failed step runs it again and records its new
-- status and result, but releases nothing and fails nothing a second time.
local function wf_event(K, step, event, now, jid)
  local old = redis.call('hget', K[3], step)
  if not old or old == 'done' or old == 'waiting' or old == 'skipped' then return end
  local g = wf_graph(K, step)
  if g['jid'] ~= jid then return end
  if old == 'failed' or old == 'cancelled' then  -- it ended before this version kept `ended:`
    redis.call('hsetnx', K[1], 'ended:' .. step, old)
  end
  wf_set(K, step, event)
  local first = (event == 'done' or event == 'failed' or event == 'cancelled')
    and redis.call('hsetnx', K[1], 'ended:' .. step, event) == 1
  if first and redis.call('hget', K[1], 'state') == 'running' then
    if event == 'done' or g['policy'] == 'continue' then
      wf_resolve(K, step, now)
    else
      if g['policy'] == 'compensate' then
        wf_list(g['comp_queue'])
        redis.call('lpush', wf_queue(g['comp_queue']), g['comp'] .. ',"enqueued_at":' .. now .. '}')
        redis.call('hset', K[1], 'compensation', g['comp_jid'])
      end
      redis.call('hset', K[1], 'state', 'failed', 'failed_step', step)
      wf_skip_waiting(K, now)
    end
  end
  wf_settle(K, now)
end
"""
_NOTIFY = {"notify_suffix": keys.status_notify("-").removeprefix(keys.status("-"))}
# Where a step's job goes and where its status record is (a graph entry has its jid and queue):
# Sidekiq's layout, or Cluster mode's, where both carry the queue's hash tag (see keys.ClusterKeyspace)
_SIDEKIQ_NAMES = f"""
local function wf_list(q) redis.call('sadd', '{keys.QUEUES}', q) end
local function wf_queue(q) return '{keys.QUEUE_PREFIX}' .. q end
local function wf_status(g) return '{keys.status("")}' .. g['jid'] end
"""
_CLUSTER_NAMES = f"""
local function wf_list(q) end
local function wf_tagged(q) if string.sub(q, 1, 1) == '{{' then return q end return '{{' .. q .. '}}' end
local function wf_queue(q) return '{keys.QUEUE_PREFIX}' .. wf_tagged(q) end
local function wf_slot(q) if string.sub(q, 1, 1) == '{{' then return string.sub(q, 1, string.find(q, '}}', 1, true)) end
  return '{{' .. q .. '}}' end
local function wf_status(g) return '{keys.PREFIX}:status:' .. wf_slot(g['queue']) .. ':' .. g['jid'] end
"""
_TEMPLATE = WORKFLOW_LIB
WORKFLOW_LIB = _TEMPLATE % {**_NOTIFY, "names": _SIDEKIQ_NAMES}

# The workflow feature's lifecycle operation: args hash, graph, state, pending keys, step, event, jid.
WORKFLOW_FEATURE = WORKFLOW_LIB + """
FEATURES['workflow'] = function(point, now, a)
  wf_event({a[1], a[2], a[3], a[4]}, a[5], a[6], now, a[7])
end
"""

# KEYS: the workflow's keys   ARGV: now. Cancel it: no further step starts (the waiting ones are
# skipped). Returns the jids of the steps enqueued or running, for `cancel` to remove or flag;
# -1 if there is no such workflow, 0 if it had already ended or been cancelled. A workflow a
# failure stopped keeps its state (failed), but its steps still running are cancelled too.
WORKFLOW_CANCEL = WORKFLOW_LIB + """
if redis.call('exists', KEYS[1]) == 0 then return -1 end
local state = redis.call('hget', KEYS[1], 'state')
if state == 'cancelled' or redis.call('hexists', KEYS[1], 'finished_at') == 1 then return 0 end
if state == 'running' then redis.call('hset', KEYS[1], 'state', 'cancelled') end
redis.call('hset', KEYS[1], 'cancelled_at', ARGV[1])
wf_skip_waiting(KEYS, ARGV[1])
local jids = {}
local all = redis.call('hgetall', KEYS[3])
for i = 1, #all, 2 do
  if all[i + 1] == 'enqueued' or all[i + 1] == 'running' then jids[#jids + 1] = wf_graph(KEYS, all[i])['jid'] end
end
wf_settle(KEYS, ARGV[1])
return jids
"""


def cluster_lua(script: str) -> str:
    """`script` (one of the above) in Cluster mode's form (see module)."""
    return script.replace(WORKFLOW_LIB, _TEMPLATE % {**_NOTIFY, "names": _CLUSTER_NAMES}, 1)
