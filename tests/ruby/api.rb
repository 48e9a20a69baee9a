# Read what sidequest wrote through Sidekiq's own Ruby API; print it as JSON.
require "sidekiq/api"
require "json"

stats = Sidekiq::Stats.new
processes = Sidekiq::ProcessSet.new.map do |p|
  {"identity" => p.identity, "hostname" => p["hostname"], "pid" => p["pid"], "busy" => p["busy"],
   "concurrency" => p["concurrency"], "queues" => p["queues"], "quiet" => p.stopping?,
   "beat" => p["beat"], "tag" => p["tag"], "labels" => p["labels"], "version" => p["version"]}
end
retries = Sidekiq::RetrySet.new.map do |job|
  {"jid" => job.jid, "klass" => job.klass, "args" => job.args, "error_class" => job["error_class"],
   "error_message" => job["error_message"], "retry_count" => job["retry_count"], "at" => job.at.to_f,
   "backtrace" => job.error_backtrace}
end
dead = Sidekiq::DeadSet.new.map { |job| {"jid" => job.jid, "klass" => job.klass, "error_class" => job["error_class"]} }
workers = Sidekiq::Workers.new.map { |pid, tid, work| {"process" => pid, "queue" => work["queue"], "jid" => work["payload"]["jid"]} }
queues = Sidekiq::Queue.all.map { |q| {"name" => q.name, "size" => q.size, "latency" => q.latency} }
puts JSON.generate({
  "processed" => stats.processed, "failed" => stats.failed, "retry_size" => stats.retry_size,
  "dead_size" => stats.dead_size, "scheduled_size" => stats.scheduled_size,
  "processes_size" => stats.processes_size, "workers_size" => stats.workers_size,
  "enqueued" => stats.enqueued, "processes" => processes, "retries" => retries, "dead" => dead,
  "workers" => workers, "queues" => queues,
  "history" => Sidekiq::Stats::History.new(2).processed
})
