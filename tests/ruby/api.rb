# Read what sidequest wrote through Sidekiq's own Ruby API; print it as JSON.
# usage: ruby api.rb [ACTION...]  (REDIS_URL names the server)
#   ACTION "quiet!" or "stop!" first sends that remote signal to every process in the ProcessSet.
# Every value below goes through the same API calls Sidekiq's Web UI makes, so an error here
# (a payload or hash Ruby cannot decode) is a compatibility bug, and the script exits non-zero.
require "sidekiq/api"
require "json"

def sorted_entry(job)
  {"jid" => job.jid, "klass" => job.klass, "display_class" => job.display_class, "args" => job.args,
   "display_args" => job.display_args, "queue" => job.queue, "error_class" => job["error_class"],
   "error_message" => job["error_message"], "retry_count" => job["retry_count"],
   "failed_at" => job["failed_at"], "retried_at" => job["retried_at"], "at" => job.at.to_f,
   "enqueued_at" => job.enqueued_at&.to_f, "created_at" => job.created_at.to_f,
   "latency" => job.latency, "tags" => job.tags, "backtrace" => job.error_backtrace}
end

ARGV.each do |action|
  raise ArgumentError, "unknown action #{action}" unless %w[quiet! stop!].include?(action)
  Sidekiq::ProcessSet.new.each { |process| process.public_send(action) }
end

stats = Sidekiq::Stats.new
processes = Sidekiq::ProcessSet.new.map do |p|
  {"identity" => p.identity, "hostname" => p["hostname"], "pid" => p["pid"], "busy" => p["busy"],
   "concurrency" => p["concurrency"], "queues" => p.queues, "quiet" => p.stopping?,
   "beat" => p["beat"], "started_at" => p["started_at"], "rss" => p["rss"], "rtt_us" => p["rtt_us"],
   "tag" => p.tag, "labels" => p.labels, "version" => p["version"]}
end
retries = Sidekiq::RetrySet.new.map { |job| sorted_entry(job) }
dead = Sidekiq::DeadSet.new.map { |job| sorted_entry(job) }
workers = Sidekiq::Workers.new.map do |pid, tid, work|
  payload = work["payload"]
  {"process" => pid, "tid" => tid, "queue" => work["queue"], "run_at" => work["run_at"],
   "jid" => payload["jid"], "class" => payload["class"], "args" => payload["args"]}
end
queues = Sidekiq::Queue.all.map { |q| {"name" => q.name, "size" => q.size, "latency" => q.latency} }
history = Sidekiq::Stats::History.new(2)
puts JSON.generate({
  "processed" => stats.processed, "failed" => stats.failed, "retry_size" => stats.retry_size,
  "dead_size" => stats.dead_size, "scheduled_size" => stats.scheduled_size,
  "processes_size" => stats.processes_size, "workers_size" => stats.workers_size,
  "enqueued" => stats.enqueued, "queue_sizes" => stats.queues,
  "process_set_size" => Sidekiq::ProcessSet.new(false).size,
  "total_concurrency" => Sidekiq::ProcessSet.new(false).total_concurrency,
  "workers_count" => Sidekiq::Workers.new.size,
  "processes" => processes, "retries" => retries, "dead" => dead,
  "workers" => workers, "queues" => queues,
  "history" => history.processed, "history_failed" => history.failed
})
