# The benchmark's jobs for Ruby Sidekiq (bench/peers/sidekiq_peer.py; the contract is _peer.py).
# Loaded by the worker (`sidekiq -r` this file) and by sidekiq_client.rb. The job bodies mirror
# _peer.noop_body and _peer.stamp_body exactly: one INCR of bench:count per noop (plus a SET on the
# 1st and an RPUSH on the BENCH_TOTALth), one RPUSH of "<sent> <started>" per stamp.
#
# Configuration: Sidekiq 6 OSS defaults (basic fetch, the plain-Ruby redis driver, REDIS_URL),
# except that
#   - the logger is at WARN, so the per-job "start"/"done" INFO lines are not written;
#   - the scheduled-job poller runs every ~1 s on average, as sidequest's scheduler does
#     (`poll_interval = 1.0`), instead of Sidekiq's default 5 s x the number of processes. The
#     wiki's knob for it ("Scheduled Jobs": `config.average_scheduled_poll_interval = 1`) feeds
#     `poll_interval_average`, set here directly: with it set, the poller's first check also
#     comes within 0-5 s of start instead of 10-15 s (sidekiq/scheduled.rb, `initial_wait`);
#   - redis-rb's deprecation warnings are off: Debian pairs Sidekiq 6.4 with redis-rb 4.8, which
#     would otherwise write a warning to stderr on every fetch (BRPOP with a positional timeout)
#     and every SADD, a cost Sidekiq 6.4 with the redis-rb it was released with does not have.
require "sidekiq"

Sidekiq.logger.level = Logger::WARN
Redis.silence_deprecations = true
Redis.sadd_returns_boolean = false # SADD replies as Redis 5 will: Sidekiq 6.4 ignores the reply
Sidekiq.options[:poll_interval_average] = 1

Sidekiq.configure_server do |config|
  config.redis = { url: ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/0") }
end

# The no-op job: mirrors _peer.noop_body.
class BenchNoop
  include Sidekiq::Worker
  sidekiq_options queue: "bench"

  LIMIT = Integer(ENV.fetch("BENCH_TOTAL", "0"))

  def perform(_i)
    started = Time.now.to_f
    n = Sidekiq.redis { |c| c.incr("bench:count") }
    Sidekiq.redis { |c| c.set("bench:first", started.to_s) } if n == 1
    Sidekiq.redis { |c| c.rpush("bench:last", Time.now.to_f.to_s) } if n == LIMIT
  end
end

# The stamp job: mirrors _peer.stamp_body.
class BenchStamp
  include Sidekiq::Worker
  sidekiq_options queue: "bench"

  def perform(sent)
    Sidekiq.redis { |c| c.rpush("bench:stamps", "#{sent} #{Time.now.to_f}") }
  end
end
