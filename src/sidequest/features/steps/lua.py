"""The steps' Lua: one script to begin a step, one to end it, one for an operator's reset, and the
lifecycle operation that removes a job's records when it ends.

Every script touches one key, the job's records (`keys.steps`: `sidequest:steps:<jid>`, or in
Cluster mode `sidequest:steps:{<q>}:<jid>`, in its queue's slot), so each is one atomic step of
its own. The hash holds `digest` (of the job's class and arguments: a re-push of the jid with
other arguments finds another digest and starts fresh), `jid`, `class`, `queue`, `created_at`,
`seq` (steps begun, for their order), and per step `s:<name>` (JSON: kind, seq, state, attempts,
started_at, ended_at, error) and, once it is done, `r:<name>` (its result, JSON, written as
given: Lua never decodes it, so no number or empty list is changed on the way).
"""

# STEP_BEGIN: KEYS[1] the records. ARGV: name, digest, now, ttl ms, jid, class, queue.
# A done step: {'done', attempts, result JSON}. Else the step is marked running (one more
# attempt) and {'running', attempts, ''} is returned: the caller runs its body.
STEP_BEGIN = """
local key, field, digest, now = KEYS[1], 's:' .. ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = redis.call('hget', key, 'digest')
if held ~= digest then
  if held then redis.call('del', key) end
  redis.call('hset', key, 'digest', digest, 'jid', ARGV[5], 'class', ARGV[6], 'queue', ARGV[7],
             'created_at', ARGV[3], 'seq', 0)
end
local meta = redis.call('hget', key, field)
local m
if meta then
  m = cjson.decode(meta)
  if m.state == 'done' then
    return {'done', m.attempts or 1, redis.call('hget', key, 'r:' .. ARGV[1]) or 'null'}
  end
  m.attempts = (tonumber(m.attempts) or 0) + 1
else
  m = {kind = 'step', seq = redis.call('hincrby', key, 'seq', 1), attempts = 1}
end
m.state, m.started_at, m.ended_at, m.error = 'running', now, nil, nil
redis.call('hset', key, field, cjson.encode(m))
redis.call('pexpire', key, ARGV[4])
return {'running', m.attempts, ''}
"""

# STEP_END: KEYS[1] the records. ARGV: name, digest, now, ttl ms, state ('done' or 'failed'),
# the result JSON (done) or the error in a few words (failed), the attempt STEP_BEGIN gave this
# run. Writes nothing (0) unless the step is still this attempt's, running: the records are
# another incarnation's, or the step was reset meanwhile (the next run runs it again), or a later
# attempt began it (this run's process was taken for dead and its job recovered: the later
# attempt's end is the one recorded, so a replay returns what the run that went on returned).
STEP_END = """
local key, field = KEYS[1], 's:' .. ARGV[1]
if redis.call('hget', key, 'digest') ~= ARGV[2] then return 0 end
local meta = redis.call('hget', key, field)
if not meta then return 0 end
local m = cjson.decode(meta)
if m.state ~= 'running' or tonumber(m.attempts) ~= tonumber(ARGV[7]) then return 0 end
m.state, m.ended_at = ARGV[5], tonumber(ARGV[3])
if ARGV[5] == 'done' then
  m.error = nil
  redis.call('hset', key, 'r:' .. ARGV[1], ARGV[6])
else
  m.error = ARGV[6]
end
redis.call('hset', key, field, cjson.encode(m))
redis.call('pexpire', key, ARGV[4])
return 1
"""

# STEP_RESET: KEYS[1] the records. ARGV: a step's name, or '' for every step. The number of
# steps forgotten (a whole reset removes the key).
STEP_RESET = """
if ARGV[1] == '' then
  local n = 0
  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
    if string.sub(f, 1, 2) == 's:' then n = n + 1 end
  end
  redis.call('del', KEYS[1])
  return n
end
return redis.call('hdel', KEYS[1], 's:' .. ARGV[1], 'r:' .. ARGV[1]) > 0 and 1 or 0
"""

# The lifecycle operation (`StepsFeature`): args the records' key, the job's digest. The records
# go when their job ends (done, dropped, cancelled, deleted), only if they are this incarnation's.
STEPS_FEATURE = """
FEATURES['steps'] = function(point, now, a)
  if redis.call('hget', a[1], 'digest') == a[2] then redis.call('del', a[1]) end
end
"""
