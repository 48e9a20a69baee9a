"""The push's one script: a push with a unique claim, a debounce or throttle record, or a laned
job is one call of `PUSH_UNIQUE` (sent by `push_plan`, for the sync and the asyncio client and
per slot in a Cluster), which writes what the client's MULTI writes (with each job's status
record) and takes the claims and records the features registered in `plugins` give it
(`unique.claim`, `flow.claim`, `results.at_push`); a laned job goes to its lane (`store.lanes`).
Its ARGV layout is `push_plan.Batch.script_args`.
"""

from __future__ import annotations

from sidequest.store import lanes

# KEYS: schedule, queues (not in Cluster mode, where the client adds the name apart)
# ARGV: job count, then 18 values per job: claim key ('' for none), claim ms, jid, queue key ('' when
# scheduled), queue name, score, payload, status key ('' for none), status ms, state, due time, flow
# code ('', 'd' debounce or 't' throttle, see `flow`), its counts key, the job's class, and its lane
# (`lanes.route`: base, level, group, limits; four '' for a plain job).
# A push with unique jobs, in one call: each job whose claim is taken (SET NX, the value its jid)
# or that has none is written as the client's MULTI writes it (SADD + LPUSH, or ZADD), with its
# status hash when it keeps one; a job whose claim is held by another copy writes nothing.
# A throttled job's claim is its period's (counted when refused); a debounced job's record holds
# its pending run's payload (no TTL: ended with its run, `flow.FlowFeature`), which it removes from
# the schedule (counted when it was there: it is replaced, and its status record goes) before it
# takes its place, so one run per key is pending.
# A laned job pushed now goes to its lane, and the queue's lanes are staged (`lanes`).
# Returns 1 (written) or 0 (refused) per job, in order.
PUSH_UNIQUE = lanes.LANES_LUA + """
local written, laned, ready, seen, listed = {}, {}, {}, {}, {}
for i = 2, 1 + 18 * tonumber(ARGV[1]), 18 do  -- every lane takes its job, before the first write
  local base, lane = ARGV[i + 14], ARGV[i + 14] .. ':' .. ARGV[i + 15] .. ':' .. ARGV[i + 16]
  if ARGV[i + 3] ~= '' and base ~= '' and not ready[lane] then  -- a bulk push's lane is checked once
    if not lane_ready(base, ARGV[i + 15], ARGV[i + 16], seen) then
      return redis.error_reply('a key of the lanes ' .. base .. ' is of another type (set by hand?): nothing pushed')
    end
    ready[lane] = true
  end
end
local i = 2
for j = 1, tonumber(ARGV[1]) do
  local flow, ok = ARGV[i + 11], true
  if flow == 'd' then
    local pending = redis.call('get', ARGV[i])
    if pending and redis.call('zrem', KEYS[1], pending) == 1 then
      redis.call('hincrby', ARGV[i + 12], ARGV[i + 13], 1)
      if ARGV[i + 7] ~= '' then  -- the replaced jid never runs: its status record (same prefix) goes
        local prefix = string.sub(ARGV[i + 7], 1, #ARGV[i + 7] - #ARGV[i + 2])
        local old = prefix .. cjson.decode(pending)['jid']
        redis.call('del', old, old .. ':notify')
      end
    end
    redis.call('set', ARGV[i], ARGV[i + 6])  -- no TTL: the record lives as long as its run (`flow`)
  elseif ARGV[i] ~= '' and not redis.call('set', ARGV[i], ARGV[i + 2], 'NX', 'PX', ARGV[i + 1]) then
    ok = false
    if flow == 't' then redis.call('hincrby', ARGV[i + 12], ARGV[i + 13], 1) end
  end
  if ok then
    if ARGV[i + 3] ~= '' then
      if KEYS[2] and not listed[ARGV[i + 4]] then  -- a bulk push's queue is added once
        redis.call('sadd', KEYS[2], ARGV[i + 4])
        listed[ARGV[i + 4]] = true
      end
      if ARGV[i + 14] ~= '' then
        lane_push(ARGV[i + 14], ARGV[i + 15], ARGV[i + 16], ARGV[i + 6], ARGV[i + 17])
        laned[ARGV[i + 14]] = ARGV[i + 3]
      else
        redis.call('lpush', ARGV[i + 3], ARGV[i + 6])
      end
    else
      redis.call('zadd', KEYS[1], ARGV[i + 5], ARGV[i + 6])
    end
    if ARGV[i + 7] ~= '' then
      redis.call('hset', ARGV[i + 7], 'state', ARGV[i + 9], 'at', ARGV[i + 10])
      redis.call('pexpire', ARGV[i + 7], ARGV[i + 8])
    end
    written[j] = 1
  else
    written[j] = 0
  end
  i = i + 18
end
for base, queue in pairs(laned) do stage(base, queue) end
return written
"""
