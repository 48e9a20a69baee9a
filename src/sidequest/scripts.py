"""The Lua scripts that need atomicity, each with the keys it touches.

Payload rewriting is done in Python before a script runs (Lua's cjson would reformat floats
and reorder fields); the scripts only move bytes, and each checks that the job is still where
it was expected, so two processes racing on the same job cannot both move it.
"""

from __future__ import annotations

from typing import Any

import redis

# KEYS: queue:<q>... (in fetch order), sidequest:reserved:<identity>
# Take the oldest job of the first non-empty queue into the reserved list; return {queue key, job}.
RESERVE = """
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


class Scripts:
    """The scripts registered on one Redis client (EVALSHA, loading them again when flushed)."""

    def __init__(self, client: redis.Redis) -> None:
        self.reserve = client.register_script(RESERVE)
        self.requeue = client.register_script(REQUEUE)
        self.recover = client.register_script(RECOVER)
        self.enqueue_due = client.register_script(ENQUEUE_DUE)

    @staticmethod
    def call(script: Any, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return script(keys=keys, args=args, client=client)
