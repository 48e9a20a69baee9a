"""Probes by the convention: liveness is local and needs no Redis, readiness checks Redis.

    readiness   `Health`, `check_redis`: Redis answers and takes writes (also the admin API's,
                `api.health`, and the dashboard's `/health`)
    watchdog    `Watchdog`: a worker process's liveness seen from inside: its background
                threads move, its event loop answers within `liveness_timeout`
    state       `LiveReport`: the last verdict, and the liveness file `sidequest health --live`
                reads (one per process, in `health_dir`); `judge` reads those files
    server      `ProbeServer`: `GET /live` and `GET /ready` on `health_port` (asyncio, bounded)
    fleet       `FleetWatch`: a supervisor's verdicts, for its whole fleet of children
"""
