# Push jobs with Ruby Sidekiq's own client; print the jids as JSON.
# usage: ruby push.rb COMMAND  (REDIS_URL names the server)
require_relative "jobs"

jids = case ARGV[0]
when "echo"
  [RubyEcho.perform_async(1, "two", {"three" => [3.5, nil, true]})]
when "echo-in"
  [RubyEcho.perform_in(3600, "later")]
when "python"
  [Sidekiq::Client.push("class" => ARGV[1], "args" => JSON.parse(ARGV[2]), "queue" => ARGV[3] || "default")]
when "boom"
  [RubyBoom.perform_async("x")]
when "bulk"
  Sidekiq::Client.push_bulk("class" => RubyEcho, "args" => (1..Integer(ARGV[1])).map { |i| [i] })
end
puts JSON.generate(jids)
