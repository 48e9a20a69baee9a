"""A worker process's background duties, each on a thread of its own beside the runners: the
heartbeat (registration, stats, the lease on jobs in hand), the poller (due scheduled and retry
jobs to their queues) and orphan recovery (the jobs of dead processes back), all run by one loop
(`loop.Background`), which the periodic scheduler and limiter leases use too.
"""
