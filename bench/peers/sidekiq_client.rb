# The client side of the Ruby Sidekiq benchmark peer: bench/peers/sidekiq_peer.py runs
#   ruby --yjit sidekiq_client.rb enqueue|latency|schedule --url URL [--mode bulk|single] [--count N] [--over S]
# and this script does what _peer.py's contract says for that command, timing itself (so Ruby's
# start-up is not counted) and printing the same JSON line as a Python peer would.
#   enqueue bulk:   Sidekiq::Client.push_bulk in slices of 1,000 (Sidekiq's documented batch size)
#   enqueue single: BenchNoop.perform_async(i) in a loop
#   latency:        BenchStamp.perform_async(now), then BLPOP bench:stamps, COUNT times
#   schedule:       BenchStamp.perform_at(due, due), due at even steps over S s from now + 1 s
require "json"
require "optparse"
require_relative "sidekiq_jobs"

def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def enqueue(mode, count)
  if mode == "bulk"
    (0...count).each_slice(1000) do |slice|
      Sidekiq::Client.push_bulk("class" => BenchNoop, "args" => slice.map { |i| [i] })
    end
  else
    count.times { |i| BenchNoop.perform_async(i) }
  end
end

def latency(count)
  Sidekiq.redis { |c| c.del("bench:stamps") }
  Array.new(count) do
    sent = Time.now.to_f
    BenchStamp.perform_async(sent)
    got = Sidekiq.redis { |c| c.blpop("bench:stamps", timeout: 30) }
    abort("latency: a stamp job did not run within 30 s") if got.nil?
    was_sent, started = got[1].split.map(&:to_f)
    started - was_sent
  end
end

def schedule(count, over)
  start = Time.now.to_f + 1.0
  count.times do |i|
    due = start + over * i / count
    BenchStamp.perform_at(due, due)
  end
end

command = ARGV.shift
opts = { mode: "bulk", count: 1000, over: 30.0 }
OptionParser.new do |o|
  o.on("--url URL") { |v| opts[:url] = v }
  o.on("--mode MODE") { |v| opts[:mode] = v }
  o.on("--count N", Integer) { |v| opts[:count] = v }
  o.on("--over S", Float) { |v| opts[:over] = v }
end.parse!(ARGV)
Sidekiq.configure_client { |config| config.redis = { url: opts.fetch(:url) } }

case command
when "enqueue"
  began = monotonic
  enqueue(opts[:mode], opts[:count])
  puts JSON.generate({ seconds: monotonic - began })
when "latency"
  puts JSON.generate({ latencies: latency(opts[:count]) })
when "schedule"
  schedule(opts[:count], opts[:over])
  puts JSON.generate({ scheduled: opts[:count] })
else
  abort("sidekiq_client.rb: unknown command #{command.inspect}")
end
