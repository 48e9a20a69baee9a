"""How commands reach Redis: key names, the core's scripts, connections from URLs (one Redis,
Sentinel, Cluster), the direct path and the event loop's shared connection, outages, and the
development server (`dev_server`, started when no `REDIS_URL` is given).
"""
