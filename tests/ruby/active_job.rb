# Rails' ActiveJob 6.1 on Sidekiq 6.4, as a Rails app has them (Debian's ruby-activejob and
# ruby-sidekiq), for sidequest's ActiveJob tests. Required by `sidekiq -r` (a Rails worker) and by
# `ruby active_job.rb push ...` (a Rails app's perform_later). Each job records what it saw in the
# `test:aj-ran` list: its ids, its executions and each argument with its Ruby class.
require "active_job"
require "sidekiq"
require "json"

ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new($stderr, level: Logger::WARN)
Time.zone_default = Time.find_zone!("UTC")  # what a Rails app's config.time_zone sets
GlobalID.app = "shop"

# A record as ActiveRecord's would be passed: by its GlobalID.
class User
  include GlobalID::Identification
  attr_reader :id

  def initialize(id)
    @id = id
  end

  def self.find(id)
    new(id)
  end
end

def described(value)
  case value
  when Hash then value.map { |k, v| [k.inspect, described(v)] }.to_h
  when Array then value.map { |v| described(v) }
  when ActiveSupport::Duration then {"class" => value.class.name, "value" => value.inspect}  # "90 seconds"
  when Numeric, nil, true, false then {"class" => value.class.name, "value" => value}
  else {"class" => value.class.name, "value" => value.to_s}
  end
end

class RecordingJob < ActiveJob::Base
  def perform(*args, **kwargs)
    seen = {"job_class" => self.class.name, "job_id" => job_id, "provider_job_id" => provider_job_id,
            "executions" => executions, "queue_name" => queue_name, "priority" => priority,
            "locale" => locale, "timezone" => timezone,
            "args" => described(args), "kwargs" => described(kwargs)}
    Sidekiq.redis { |c| c.rpush("test:aj-ran", JSON.generate(seen)) }
    raise ArgumentError, "receipt failed" if self.class.name == "FailingReceiptJob" && Sidekiq.redis { |c| c.get("test:aj-fail") }
  end
end

class SendReceiptJob < RecordingJob
  queue_as :default
end

class FailingReceiptJob < RecordingJob
  queue_as :default
end

if $PROGRAM_NAME == __FILE__
  case ARGV[0]
  when "push"  # a Rails app's calls; prints the Sidekiq jids
    jobs = [SendReceiptJob.perform_later(42, "eur", note: "x"),
            SendReceiptJob.perform_later({"a" => 1, b: [2, nil]}, :card, Time.utc(2024, 1, 2, 3, 4, 5),
                                         Date.new(2024, 1, 2), 90.seconds, ActiveSupport::HashWithIndifferentAccess.new(k: 1),
                                         User.new(7))]
    puts JSON.generate(jobs.map(&:provider_job_id))
  when "push-failing"
    puts JSON.generate([FailingReceiptJob.perform_later(7, "usd", note: "retry me").provider_job_id])
  else
    abort "usage: ruby active_job.rb push|push-failing"
  end
end
