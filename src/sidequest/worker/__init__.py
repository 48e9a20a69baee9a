"""The worker: a launcher composes one process of runners (threads or an event loop), fetch,
acknowledgement, heartbeat, poller and recovery; the supervisor runs several processes.
"""
