"""The core's Lua scripts (the moves of a job between its keys), each with the keys it touches.

A feature's own scripts live beside it: `unique.PUSH_UNIQUE`, the lifecycle operations
(`unique.UNIQUE_FEATURE`, `results.STATUS_FEATURE`) and the limits (`limiter`). The task
and periodic scripts below are still to move to their features (tests/test_layers.py lists them).

Payload rewriting is done in Python before a script runs (Lua's cjson would reformat floats
and reorder fields); the scripts only move bytes, and each checks that the job is still where
it was expected, so two processes racing on the same job cannot both move it.

The scripts that end a job's stay in a processor (SETTLE, RESERVE's acknowledgement, RECOVER)
also run the commands that features contribute to that point of the job's life (see
`lifecycle`): after the core's own ARGV come the features' operations, each `name, n, arg1..argn`,
run by `run_ops` through the `FEATURES` table that the lifecycle's Lua fills. An operation runs
only when the core move happened, so a feature never records a fate that was not applied.
"""

from __future__ import annotations

from typing import Any

import redis

from . import keys

# Shared by the scripts below. `settle` applies one outcome to a job a processor holds:
#   mode 'ack'    remove it (done, dropped)          'retry'  remove it, ZADD dest score blob
#   mode 'dead'   remove it, ZADD dest, trim dest    'queue'  remove it, RPUSH dest blob (the head)
#   mode 'taken'  only check it is still held         'snooze' remove it, ZADD dest (schedule) score blob
# With checked = '1' it first removes `raw` from `reserved` and does nothing at all if it was not
# there. Only two things take a job out of a process's reserved list: the process itself, and
# recovery (which records what it took in `recovered`, the set `keys.recovered(identity)`). So
# the reply tells them apart: 0 when another process recovered the job (its copy is the live
# one), 2 when this very outcome was already written by an earlier attempt whose reply was lost
# (where the outcome writes somewhere, that is checked there too).
# Basic fetch keeps no reserved copy and passes checked = '0'.
_CORE_LIB = """
local FEATURES = {}
%(features)s
local function run_ops(argv, i, point, now)
  local n = tonumber(argv[i])
  i = i + 1
  for _ = 1, n do
    local name, count = argv[i], tonumber(argv[i + 1])
    local a = {}
    for j = 1, count do a[j] = argv[i + 1 + j] end
    i = i + 2 + count
    FEATURES[name](point, now, a)
  end
  return i
end
local function skip_ops(argv, i)
  local n = tonumber(argv[i])
  i = i + 1
  for _ = 1, n do i = i + 2 + tonumber(argv[i + 1]) end
  return i
end
local function settle(reserved, checked, raw, mode, dest, blob, score, queue, cutoff, cap, recovered)
  if checked == '1' then
    if mode == 'taken' then
      if not redis.call('lpos', reserved, raw) then return 0 end
    elseif redis.call('lrem', reserved, -1, raw) == 0 then
      if recovered == nil or redis.call('sismember', recovered, raw) == 1 then return 0 end
      if mode == 'retry' or mode == 'snooze' or mode == 'dead' then
        return redis.call('zscore', dest, blob) and 2 or 0
      end
      if mode == 'queue' then return redis.call('lpos', dest, blob) and 2 or 0 end
      return 2
    end
  end
  if mode == 'retry' or mode == 'snooze' then
    redis.call('zadd', dest, score, blob)
  elseif mode == 'dead' then
    redis.call('zadd', dest, score, blob)
    redis.call('zremrangebyscore', dest, '-inf', cutoff)
    redis.call('zremrangebyrank', dest, 0, -(tonumber(cap) + 1))
  elseif mode == 'queue' then
    redis.call('sadd', '%(queues)s', queue)
    redis.call('rpush', dest, blob)
  end
  return 1
end
"""

# KEYS: reserved list, destination (retry | dead | queue:<q> | any key for 'ack'/'taken'),
#       sidequest:recovered:<identity> of the reserved list's owner
# ARGV: checked, raw, mode, blob, score, queue name, dead cutoff, dead cap, now, point, ops...
SETTLE = """
local settled = settle(KEYS[1], ARGV[1], ARGV[2], ARGV[3], KEYS[2], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8],
                       KEYS[3])
if settled ~= 1 then
  return settled
end
run_ops(ARGV, 11, ARGV[10], ARGV[9])
return 1
"""

# KEYS: queue:<q>... (in fetch order), this process's batch list, sidequest:reservations, the
#       calling processor's own list (registered when nothing was found: it blocks on it next)
# ARGV: now, how many jobs to take, how many successes to acknowledge, then for each success:
#       its bytes and its 'finished' ops.
# First acknowledge the successes (remove them from the batch list; each one's ops run only if it
# was there), then take up to `want` of the oldest jobs of the queues, in order, into the batch
# list. Few successes are removed one LREM each; more, by rewriting the (small) list once, with
# the jobs taken in the same write. A list that was empty is registered again in reservations.
# Returns {queue key, job, queue key, job, ...}, empty when nothing waits.
RESERVE = """
local n = #KEYS
local batch = KEYS[n - 2]
local now, want, acks = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local raws, at, removed = {}, {}, {}
local i = 4
for a = 1, acks do
  raws[a], at[a] = ARGV[i], i + 1
  i = skip_ops(ARGV, i + 1)
end
local keep = nil  -- set when the list is rewritten: what stays, the taken jobs added after
if acks < 3 then
  for a = 1, acks do removed[a] = redis.call('lrem', batch, -1, raws[a]) > 0 end
elseif acks > 0 then
  local owed, gone, kept = {}, {}, {}
  for a = 1, acks do owed[raws[a]] = (owed[raws[a]] or 0) + 1 end
  local held = redis.call('lrange', batch, 0, -1)
  for _, raw in ipairs(held) do
    if (owed[raw] or 0) > 0 then
      owed[raw] = owed[raw] - 1
      gone[raw] = (gone[raw] or 0) + 1
    else
      kept[#kept + 1] = raw
    end
  end
  if #kept < #held then keep = kept end
  for a = 1, acks do
    removed[a] = (gone[raws[a]] or 0) > 0
    if removed[a] then gone[raws[a]] = gone[raws[a]] - 1 end
  end
end
for a = 1, acks do
  if removed[a] then run_ops(ARGV, at[a], 'finished', now) end
end
local got, taken = {}, {}
for q = 1, n - 3 do
  if want <= 0 then break end
  local jobs = redis.call('rpop', KEYS[q], want)
  if jobs then
    for _, job in ipairs(jobs) do
      got[#got + 1] = KEYS[q]
      got[#got + 1] = job
      taken[#taken + 1] = job
    end
    want = want - #jobs
  end
end
local write, was_empty = taken, nil
if keep then
  redis.call('del', batch)
  for _, job in ipairs(taken) do keep[#keep + 1] = job end
  write, was_empty = keep, #keep == #taken
end
for s = 1, #write, 1000 do
  local length = redis.call(keep and 'rpush' or 'lpush', batch, unpack(write, s, math.min(s + 999, #write)))
  if s == 1 and (was_empty or (was_empty == nil and length == math.min(1000, #write))) then
    redis.call('sadd', KEYS[n - 1], batch)
  end
end
if #got == 0 and ARGV[2] ~= '0' then redis.call('sadd', KEYS[n - 1], batch, KEYS[n]) end
return got
"""

# KEYS: a dead process's reserved list, its heartbeat hash <identity>, queue:<q> or dead,
#       sidequest:recovered:<identity>
# ARGV: job as reserved, job to write, 'queue' | 'dead', score, queue name, cutoff, cap, now,
#       seconds to keep the trace, ops...
# Recover one job of a dead process: only while that process is still silent, and only once;
# the trace tells that process, should it wake up, that the job was taken from it (see settle).
RECOVER = """
if redis.call('exists', KEYS[2]) == 1 then
  return -1
end
if settle(KEYS[1], '1', ARGV[1], ARGV[3], KEYS[3], ARGV[2], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) ~= 1 then
  return 0
end
redis.call('sadd', KEYS[4], ARGV[1])
redis.call('expire', KEYS[4], ARGV[9])
run_ops(ARGV, 10, 'recovered', ARGV[8])
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

# Operator actions (see `api`). Each names the exact stored entry (its bytes) and moves it only
# if it is still there, so two operators acting on one entry at once get one move between them
# (the other call returns 0 and writes nothing). The lifecycle's operations for the point
# (requeued, killed, deleted) run in the same call, after the core's own ARGV, as in SETTLE.

# KEYS: schedule|retry|dead, queue:<q>, queues   ARGV: entry, job to enqueue, queue name, now, point, ops...
# Retry or run now: remove the entry and push the job onto its queue (LPUSH, as a push does).
ADMIN_REQUEUE = """
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('sadd', KEYS[3], ARGV[3])
redis.call('lpush', KEYS[2], ARGV[2])
run_ops(ARGV, 6, ARGV[5], ARGV[4])
return 1
"""

# KEYS: schedule|retry|dead, dead   ARGV: entry, score (now), dead cutoff, dead cap, now, point, ops...
# Kill: remove the entry and add it, unchanged, to `dead` (trimmed as a death is, see settle).
ADMIN_KILL = """
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
settle(KEYS[2], '0', ARGV[1], 'dead', KEYS[2], ARGV[1], ARGV[2], '', ARGV[3], ARGV[4])
run_ops(ARGV, 7, ARGV[6], ARGV[5])
return 1
"""

# KEYS: schedule|retry|dead or queue:<q>   ARGV: entry, 'zset' or an LREM count (1 from the head,
# -1 from the tail), now, point, ops...   Delete: remove the entry (one copy of it from a list).
ADMIN_DELETE = """
local removed
if ARGV[2] == 'zset' then
  removed = redis.call('zrem', KEYS[1], ARGV[1])
else
  removed = redis.call('lrem', KEYS[1], tonumber(ARGV[2]), ARGV[1])
end
if removed == 0 then
  return 0
end
run_ops(ARGV, 5, ARGV[4], ARGV[3])
return 1
"""

# KEYS: queue:<q>, queues   ARGV: queue name. Drop an emptied queue's name from `queues` (as
# Sidekiq's Queue#clear does); a queue that got a job meanwhile keeps it.
ADMIN_FORGET_QUEUE = """
if redis.call('llen', KEYS[1]) == 0 then
  return redis.call('srem', KEYS[2], ARGV[1])
end
return 0
"""

# KEYS: sidequest:reservations, then reserved lists of a process that stops cleanly
# Forget the lists that are empty (a list still holding a job stays, for recovery to find).
FORGET_RESERVED = """
local forgotten = 0
for i = 2, #KEYS do
  if redis.call('llen', KEYS[i]) == 0 then
    forgotten = forgotten + redis.call('srem', KEYS[1], KEYS[i])
  end
end
return forgotten
"""

# KEYS: sidequest:recovery-lock   ARGV: owner. Release the lock only if we still own it.
RELEASE_LOCK = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


# The task library (see `tasks`): a task's keys (keys.task_keys) are a table K: hash, events
# hash, order zset, then the status zsets in keys.TASK_STATUSES order; `task_keys(id)` builds the
# same names from keys' prefix. When a sealed task has every job finished, failed or error, it
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
      redis.call('sadd', '%(queues)s', cb[2])
      redis.call('lpush', '%(queue_prefix)s' .. cb[2], cb[1] .. ',"enqueued_at":' .. now .. '}')
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
""" % {"queues": keys.QUEUES, "queue_prefix": keys.QUEUE_PREFIX, "task_prefix": keys.task(""),
       "suffixes": ", ".join(f"'{suffix}'" for suffix in keys.task_key_suffixes())}

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


def core_lib(features_lua: str) -> str:
    return _CORE_LIB % {"features": features_lua, "queues": keys.QUEUES}


class Scripts:
    """The core scripts registered on one Redis client (EVALSHA, loading them again when flushed).

    `features_lua` is the lifecycle's Lua (`Lifecycle.lua`): the functions its operations call.
    """

    def __init__(self, client: redis.Redis, features_lua: str = "") -> None:
        lib = core_lib(features_lua)
        self.settle = client.register_script(lib + SETTLE)
        self.reserve = client.register_script(lib + RESERVE)
        self.recover = client.register_script(lib + RECOVER)
        self.enqueue_due = client.register_script(ENQUEUE_DUE)
        self.release_lock = client.register_script(RELEASE_LOCK)
        self.forget_reserved = client.register_script(FORGET_RESERVED)

    @staticmethod
    def call(script: Any, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return script(keys=keys, args=args, client=client)
