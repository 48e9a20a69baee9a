"""The core's Lua scripts (the moves of a job between its keys), each with the keys it touches.

The push's script lives with the push (`client.push_script.PUSH_UNIQUE`), and a feature's own
scripts beside it, never here: the lifecycle operations (`unique.UNIQUE_FEATURE`,
`results.STATUS_FEATURE`, `tasks.lua.TASK_FEATURE`), the limits (`limiter`), the task scripts
(`tasks.lua`) and the periodic claim (`periodic.scheduler`).

Payload rewriting is done in Python before a script runs (Lua's cjson would reformat floats
and reorder fields); the scripts only move bytes, and each checks that the job is still where
it was expected, so two processes racing on the same job cannot both move it.

The scripts that end a job's stay in a processor (SETTLE, RESERVE's acknowledgement, RECOVER)
also run the commands that features contribute to that point of the job's life (see
`lifecycle`): after the core's own ARGV come the features' operations, each `name, n, arg1..argn`,
run by `run_ops` through the `FEATURES` table that the lifecycle's Lua fills. An operation runs
only when the core move happened, so a feature never records a fate that was not applied.

A feature's operation runs after the core's move, under `pcall`: an error reply of one of its
commands (a key of the wrong type, set by hand) neither aborts nor half-applies the move, and
does not stop the other operations of the call. The script returns such faults beside its reply
(`answer`, and RESERVE's last element), for `faults` to log with the job's jid; the fate stands.
"""

from __future__ import annotations

from typing import Any

import redis

from sidequest.store import keys, lanes

# How far from the head of its queue a put-back sent again (its reply lost) looks for its first
# write. Between the two only other put-backs can go ahead of it (pushes go to the other end, and
# a job taken meanwhile is not there to find): at most one per running or prefetched job of the
# processes stopping at that moment. A miss only makes the reply 0 instead of 2; nothing is written.
PUT_BACK_DEPTH = 1000

# Shared by the scripts below. `settle` applies one outcome to a job a processor holds:
#   mode 'ack'    remove it (done, dropped)          'retry'  remove it, ZADD dest score blob
#   mode 'dead'   remove it, ZADD dest, trim dest    'queue'  remove it, RPUSH dest blob (the head)
#   mode 'taken'  only check it is still held         'snooze' remove it, ZADD dest (schedule) score blob
# With checked = '1' it first removes `raw` from `reserved` and does nothing at all if it was not
# there. Only two things take a job out of a process's reserved list: the process itself, and
# recovery (which records what it took in `recovered`, the set `keys.recovered(identity)`). So
# the reply tells them apart: 0 when another process recovered the job (its copy is the live
# one), 2 when this very outcome was already written by an earlier attempt whose reply was lost
# (where the outcome writes somewhere, that is checked there too). A put-back's earlier write is
# looked for among the PUT_BACK_DEPTH jobs at the queue's head only: a queue holds a million jobs,
# and a scan of it all (84 ms at 1,000,000, bench/scripts.py) would stall Redis for every client.
# Basic fetch keeps no reserved copy and passes checked = '0'.
# `run_ops` runs each operation under pcall and records a failure in FAULTS as five fields: which
# job (`tag`: 0, or the number of RESERVE's acknowledgement), the feature, the point, the error, and
# the operation's arguments that name keys (space-separated), for the log line (see `faults`).
# Redis 7 raises a command's error as a table ({err = ...}), Redis 6.2 as a string.
_CORE_LIB = """
local FEATURES = {}
local FAULTS = {}
%(lanes)s
%(features)s
local function fault(tag, name, point, err, named)
  if type(err) == 'table' then err = err.err or err.message end
  for _, v in ipairs({tag, name, point, tostring(err), named}) do FAULTS[#FAULTS + 1] = v end
end
local function key_args(a)
  local named = {}
  for _, arg in ipairs(a) do
    if string.sub(arg, 1, %(prefix_length)d) == '%(prefix)s' then named[#named + 1] = arg end
  end
  return table.concat(named, ' ')
end
local function run_ops(argv, i, point, now, tag)
  local n = tonumber(argv[i])
  i = i + 1
  for _ = 1, n do
    local name, count = argv[i], tonumber(argv[i + 1])
    local a = {}
    for j = 1, count do a[j] = argv[i + 1 + j] end
    i = i + 2 + count
    local ok, err = pcall(FEATURES[name], point, now, a)
    if not ok then fault(tag or 0, name, point, err, key_args(a)) end
  end
  return i
end
local function answer(value)
  if #FAULTS == 0 then return value end
  return {value, unpack(FAULTS)}
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
      if mode == 'queue' then  -- at the head (the right end) unless taken since: a bounded look there
        return redis.call('lpos', dest, blob, 'RANK', -1, 'MAXLEN', %(put_back_depth)d) and 2 or 0
      end
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
    %(register)s
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
return answer(1)
"""

# KEYS: queue:<q>... (in fetch order), this process's batch list, sidequest:reservations, the
#       calling processor's own list (registered when nothing was found: it blocks on it next)
# ARGV: now, how many jobs to take, how many successes to acknowledge, then for each success:
#       its bytes and its 'finished' ops.
# First acknowledge the successes (remove them from the batch list; each one's ops run only if it
# was there), then take up to `want` of the oldest jobs of the queues, in order, into the batch
# list. Few successes are removed one LREM each; more, by rewriting the (small) list once, with
# the jobs taken in the same write. A list that was empty is registered again in reservations.
# Returns {queue key, job, queue key, job, ...}, empty when nothing waits, and when an operation or
# a queue failed, the faults (see `run_ops`; a queue's tag is minus its position in KEYS) last.
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
  if removed[a] then run_ops(ARGV, at[a], 'finished', now, a) end
end
local got, taken = {}, {}
for q = 1, n - 3 do
  if want <= 0 then break end
  local jobs = redis.pcall('rpop', KEYS[q], want)  -- a queue key of the wrong type: that queue's fault
  if type(jobs) == 'table' and jobs.err then
    fault(-q, 'queue', 'taken', jobs.err, KEYS[q])
  elseif jobs then
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
if #FAULTS > 0 then got[#got + 1] = FAULTS end
return got
"""

# KEYS: a dead process's reserved list, queue:<q> or dead, sidequest:recovered:<identity>, its
#       heartbeat hash <identity> (not in Cluster mode, where the caller reads it just before)
# ARGV: job as reserved, job to write, 'queue' | 'dead', score, queue name, cutoff, cap, now,
#       seconds to keep the trace, ops...
# Recover one job of a dead process: only while that process is still silent, and only once;
# the trace tells that process, should it wake up, that the job was taken from it (see settle).
RECOVER = """
if KEYS[4] and redis.call('exists', KEYS[4]) == 1 then
  return -1
end
if settle(KEYS[1], '1', ARGV[1], ARGV[3], KEYS[2], ARGV[2], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) ~= 1 then
  return 0
end
redis.call('sadd', KEYS[3], ARGV[1])
redis.call('expire', KEYS[3], ARGV[9])
run_ops(ARGV, 10, 'recovered', ARGV[8])
return answer(1)
"""

# KEYS: schedule|retry, queue:<q>, queues (not in Cluster mode: its caller adds the name apart)
# ARGV: job as scheduled, job to enqueue, queue name, then for a laned job its lane (`lanes.route`:
# base, level, group, limits)
# Move one due job from a sorted set to its queue (a laned job: to its lane, then stage); a no-op
# if another poller got it first. A laned job whose lane keys cannot take it (set by hand, of
# another type) goes to its queue as a plain job, and the reply says so (2), rather than fail the
# poller's pass on it again and again.
ENQUEUE_DUE = lanes.LANES_LUA + """
local laned = ARGV[4] and ARGV[4] ~= ''
local usable = laned and lane_ready(ARGV[4], ARGV[5], ARGV[6])
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
  if KEYS[3] then redis.call('sadd', KEYS[3], ARGV[3]) end
  if usable then
    lane_push(ARGV[4], ARGV[5], ARGV[6], ARGV[2], ARGV[7])
    stage(ARGV[4], KEYS[2])
  else
    redis.call('lpush', KEYS[2], ARGV[2])
  end
  return (laned and not usable) and 2 or 1
end
return 0
"""

# Operator actions (see `api`). Each names the exact stored entry (its bytes) and moves it only
# if it is still there, so two operators acting on one entry at once get one move between them
# (the other call returns 0 and writes nothing). The lifecycle's operations for the point
# (requeued, killed, deleted) run in the same call, after the core's own ARGV, as in SETTLE.

# KEYS: schedule|retry|dead, queue:<q>, queues (not in Cluster mode)   ARGV: entry, job to enqueue,
# queue name, now, point, the job's lane (`lanes.route`, or four ''), ops...
# Retry or run now: remove the entry and push the job onto its queue (LPUSH, as a push does), a
# laned job onto its lane (then stage).
ADMIN_REQUEUE = """
local usable = ARGV[6] ~= '' and lane_ready(ARGV[6], ARGV[7], ARGV[8])  -- else its queue, as a plain job
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if KEYS[3] then redis.call('sadd', KEYS[3], ARGV[3]) end
if usable then
  lane_push(ARGV[6], ARGV[7], ARGV[8], ARGV[2], ARGV[9])
  stage(ARGV[6], KEYS[2])
else
  redis.call('lpush', KEYS[2], ARGV[2])
end
run_ops(ARGV, 10, ARGV[5], ARGV[4])
return answer(1)
"""

# KEYS: schedule|retry|dead, dead   ARGV: entry, score (now), dead cutoff, dead cap, now, point, ops...
# Kill: remove the entry and add it, unchanged, to `dead` (trimmed as a death is, see settle).
ADMIN_KILL = """
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
  return 0
end
settle(KEYS[2], '0', ARGV[1], 'dead', KEYS[2], ARGV[1], ARGV[2], '', ARGV[3], ARGV[4])
run_ops(ARGV, 7, ARGV[6], ARGV[5])
return answer(1)
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
return answer(1)
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


def core_lib(features_lua: str, cluster: bool = False) -> str:
    """The shared functions. In Cluster mode a put-back does not add its queue to `queues`
    (another slot): the queue is listed already, since its job came from it."""
    register = "" if cluster else f"redis.call('sadd', '{keys.QUEUES}', queue)"
    prefix = f"{keys.PREFIX}:"
    return _CORE_LIB % {"features": features_lua, "register": register, "prefix": prefix,
                        "prefix_length": len(prefix), "lanes": lanes.LANES_LUA, "put_back_depth": PUT_BACK_DEPTH}


class Scripts:
    """The core scripts registered on one Redis client (EVALSHA, loading them again when flushed).

    `features_lua` is the lifecycle's Lua (`Lifecycle.lua`): the functions its operations call.
    """

    def __init__(self, client: redis.Redis, features_lua: str = "") -> None:
        self.keys = keys.space(client)
        lib = core_lib(features_lua, self.keys.cluster)
        self.settle = client.register_script(lib + SETTLE)
        self.reserve = client.register_script(lib + RESERVE)
        self.recover = client.register_script(lib + RECOVER)
        self.enqueue_due = client.register_script(ENQUEUE_DUE)
        self.release_lock = client.register_script(RELEASE_LOCK)
        self.forget_reserved = client.register_script(FORGET_RESERVED)
        self.stage = client.register_script(lanes.STAGE)

    @staticmethod
    def call(script: Any, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return script(keys=keys, args=args, client=client)
