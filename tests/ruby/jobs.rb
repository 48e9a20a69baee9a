# Ruby Sidekiq jobs used by sidequest's compatibility tests. Each records what it received
# in the `test:ruby-ran` list so the Python side can check it.
require "sidekiq"
require "json"

class RubyEcho
  include Sidekiq::Worker
  sidekiq_options queue: "default"

  def perform(*args)
    Sidekiq.redis { |c| c.rpush("test:ruby-ran", JSON.generate({"jid" => jid, "args" => args})) }
  end
end

# Same wire name as sidequest's test job, so a payload pushed by sidequest runs here.
class Echo
  include Sidekiq::Worker

  def perform(*args)
    Sidekiq.redis { |c| c.rpush("test:ruby-ran", JSON.generate({"jid" => jid, "args" => args, "class" => "Echo"})) }
  end
end

class RubyBoom
  include Sidekiq::Worker
  sidekiq_options retry: 2, backtrace: true

  def perform(*args)
    raise ArgumentError, "ruby boom"
  end
end

# Same wire name as sidequest's KwEcho, pushed with keyword arguments: records what perform receives.
class KwEcho
  include Sidekiq::Worker

  def perform(*args, **kwargs)
    Sidekiq.redis { |c| c.rpush("test:ruby-ran", JSON.generate({"jid" => jid, "args" => args, "kwargs" => kwargs})) }
  end
end
