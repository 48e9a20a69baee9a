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

# The records as a begin finds them: this incarnation's (its digest), or opened afresh (another
# incarnation's, a re-push of the jid with other arguments, are dropped). KEYS[1] the records;
# ARGV[2] the digest, ARGV[3] now, ARGV[5..7] jid, class, queue (STEP_BEGIN's and WAIT_BEGIN's).
_OPEN = """local held = redis.call('hget', key, 'digest')
if held ~= digest then
  if held then redis.call('del', key) end
  redis.call('hset', key, 'digest', digest, 'jid', ARGV[5], 'class', ARGV[6], 'queue', ARGV[7],
             'created_at', ARGV[3], 'seq', 0)
end
"""


# STEP_BEGIN: KEYS[1] the records. ARGV: name, digest, now, ttl ms, jid, class, queue.
# A done step: {'done', attempts, result JSON}. Else the step is marked running (one more
# attempt) and {'running', attempts, ''} is returned: the caller runs its body.
STEP_BEGIN = """
local key, field, digest, now = KEYS[1], 's:' .. ARGV[1], ARGV[2], tonumber(ARGV[3])
""" + _OPEN + """local meta = redis.call('hget', key, field)
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
# At `snoozed` of a job parked by a wait, args go on: 'park', its entry in `schedule`, that set's
# key, the awaited event (or ''): the entry is kept in the records (`parked`) for `EVENT_SEND`, in
# the call that parks it; an event that came while the run was ending makes it due now (the
# poller moves it), so no event is missed between the wait's start and the park.
STEPS_FEATURE = """
FEATURES['steps'] = function(point, now, a)
  if redis.call('hget', a[1], 'digest') ~= a[2] then return end
  if a[3] == 'park' then
    redis.call('hset', a[1], 'parked', a[4])
    if a[6] ~= '' and redis.call('hexists', a[1], 'e:' .. a[6]) == 1 then
      redis.call('zadd', a[5], 'XX', now, a[4])
    end
    return
  end
  redis.call('del', a[1])
end
"""

# WAIT_BEGIN (durable waits, `waits`): KEYS[1] the records. ARGV: name, digest, now, ttl ms, jid,
# class, queue, kind ('sleep' or 'wait'), until (epoch seconds), event ('' for a sleep).
# The wait's record `s:<name>` (kind, seq, state, until, event, started_at, ended_at) is made the
# first time; `e:<event>` is an event sent and not yet received, `waiting` the event a parked wait
# waits for (`EVENT_SEND` wakes it), `parked` the job's entry in `schedule` (`STEPS_FEATURE`).
# Returns {'done', result JSON} (passed: the sleep's time came, or the event's payload, which the
# record keeps), {'timed_out', until} (recorded: every later run raises again) or {'waiting', until}.
WAIT_BEGIN = """
local key, name, digest, now = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local field = 's:' .. name
""" + _OPEN + """local meta = redis.call('hget', key, field)
local m
if meta then
  m = cjson.decode(meta)
  if m.state == 'done' then return {'done', redis.call('hget', key, 'r:' .. name) or 'null'} end
  if m.state == 'timed_out' then return {'timed_out', tostring(m['until'])} end
end
if not m or m.state ~= 'waiting' then
  local seq = m and m.seq or redis.call('hincrby', key, 'seq', 1)
  m = {kind = ARGV[8], seq = seq, attempts = 1, state = 'waiting', started_at = now, ['until'] = tonumber(ARGV[9])}
  if ARGV[10] ~= '' then m.event = ARGV[10] end
end
local answer
local sent = m.event and redis.call('hget', key, 'e:' .. m.event)
if sent then
  redis.call('hdel', key, 'e:' .. m.event, 'waiting')
  redis.call('hset', key, 'r:' .. name, sent)
  m.state, m.ended_at = 'done', now
  answer = {'done', sent}
elseif now >= m['until'] then
  m.ended_at = now
  if m.event then
    m.state = 'timed_out'
    redis.call('hdel', key, 'waiting')
    answer = {'timed_out', tostring(m['until'])}
  else
    m.state = 'done'
    redis.call('hset', key, 'r:' .. name, 'null')
    answer = {'done', 'null'}
  end
else
  if m.event then redis.call('hset', key, 'waiting', m.event) end
  answer = {'waiting', tostring(m['until'])}
end
redis.call('hset', key, field, cjson.encode(m))
redis.call('pexpire', key, ARGV[4])
return answer
"""

# EVENT_SEND (`events.send_event`): KEYS[1] the records. ARGV: event, payload JSON, now, ttl ms,
# then digest, jid, class, queue of a job found without records ('' four times: the records must
# exist). Keeps the event (`e:<event>`, a later one of the same name replaces it) for the job's
# wait; {0, ''} when there are no records to keep it in, {1, parked entry} when the job is parked
# waiting for this event (the caller moves that entry to its queue), else {1, ''}.
EVENT_SEND = """
local key = KEYS[1]
if redis.call('exists', key) == 0 then
  if ARGV[5] == '' then return {0, ''} end
  redis.call('hset', key, 'digest', ARGV[5], 'jid', ARGV[6], 'class', ARGV[7], 'queue', ARGV[8],
             'created_at', ARGV[3], 'seq', 0)
end
redis.call('hset', key, 'e:' .. ARGV[1], ARGV[2])
redis.call('pexpire', key, ARGV[4])
if redis.call('hget', key, 'waiting') == ARGV[1] then
  return {1, redis.call('hget', key, 'parked') or ''}
end
return {1, ''}
"""
