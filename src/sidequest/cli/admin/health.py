"""`sidequest health`: a container's liveness (local, no Redis) or readiness (Redis), for exec
probes: exit 0 healthy, 1 not, with one line saying why (see `sidequest.api.health`)."""

from __future__ import annotations

from typing import Any

import click

from sidequest.cli.admin.connect import AdminCommand, redis_url_option
from sidequest.cli.root import UserError, main
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisURLError
from sidequest.store.redaction import mask_url


@main.command(cls=AdminCommand)
@click.option("--live", "--liveness", "live", is_flag=True,
              help="Liveness, local and without Redis: each worker process of this machine (or the one of "
                   "--pidfile) says its threads and event loop answer (--liveness: the same).")
@click.option("--ready", "--readiness", "ready", is_flag=True,
              help="Readiness: Redis answers and takes writes, and with --pidfile that worker is registered "
                   "(--readiness: the same; the check when none is named).")
@click.option("--heartbeat", is_flag=True,
              help="This host's worker process has a fresh heartbeat in Redis (by default any one of this "
                   "hostname); fails while Redis is down, so no liveness probe.")
@click.option("-P", "--pidfile", type=click.Path(dir_okay=False),
              help="The worker that wrote this pidfile (`worker -P`); for --heartbeat, also its children "
                   "under --processes.")
@click.option("--identity", metavar="ID", help="--heartbeat of this one worker process (see `sidequest processes`).")
@click.option("--hostname", metavar="NAME",
              help="--heartbeat: the host whose workers count (default: the hostname setting, else this "
                   "machine's name).")
@click.option("--max-age", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="--heartbeat: oldest heartbeat that is fresh (default: 6 heartbeat intervals, at most the "
                   "heartbeat TTL: 30 s with the default settings).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
              metavar="SECONDS", help="How long to wait for Redis.")
@redis_url_option
def health(live: bool, ready: bool, heartbeat: bool, pidfile: str | None, identity: str | None,
           hostname: str | None, max_age: float | None, timeout: float, redis_url: str | None) -> None:
    """Check health for a container probe: exit 0 if healthy, 1 if not, with one line saying why.

    \b
    Examples:
      sidequest health --live                        # this machine's workers answer (no Redis)
      sidequest health --live -P /tmp/worker.pid     # that worker (or supervisor's fleet) answers
      sidequest health --ready                       # Redis answers and takes writes
      sidequest health --heartbeat -P /tmp/worker.pid  # its heartbeats in Redis are fresh
    Liveness reads the files workers write in health_dir (SIDEQUEST_HEALTH_DIR): run it where
    the worker runs, with the same settings.
    """
    from sidequest.api import health as checks

    chosen = [name for name, value in (("--identity", identity), ("--hostname", hostname),
                                       ("--max-age", max_age)) if value is not None]
    if chosen and not heartbeat:
        raise UserError(f"{chosen[0]} applies to the Redis heartbeat check: add --heartbeat")
    if pidfile and identity:
        raise UserError("give either --pidfile or --identity, not both")
    try:
        config = Config.from_env()
        if redis_url:
            config = config.replace(redis_url=redis_url)
    except (ConfigError, RedisURLError) as exc:
        raise UserError(str(exc)) from None
    verdict = _verdict(checks, config, live=live, ready=ready or not (live or heartbeat), heartbeat=heartbeat,
                       pidfile=pidfile, identity=identity, hostname=hostname, max_age=max_age, timeout=timeout)
    if not verdict.ok:
        click.echo(f"unhealthy: {verdict.reason}")
        raise SystemExit(1)
    click.echo(f"healthy: {verdict.reason}")


def _verdict(checks: Any, config: Config, *, live: bool, ready: bool, heartbeat: bool, pidfile: str | None,
             identity: str | None, hostname: str | None, max_age: float | None, timeout: float) -> Any:
    """The checks asked for, in order, up to the first that fails: one `Health` for them all."""
    verdicts = []
    try:
        pid = checks.pidfile_pid(pidfile) if pidfile else None
    except LookupError as exc:
        return checks.Health(False, str(exc))
    if live:  # first, and without a Redis client: liveness must not depend on Redis
        verdicts.append(checks.check_live(config, None if pid is None else [pid]))
    if (ready or heartbeat) and all(v.ok for v in verdicts):
        try:
            client = checks.probe_client(config, timeout)
        except (ConfigError, RedisURLError) as exc:
            raise UserError(str(exc)) from None
        if ready:
            verdicts.append(checks.check_redis(client, write=True, where=f"Redis at {mask_url(config.url)}"))
            if pid is not None and verdicts[-1].ok:
                verdicts.append(checks.check_live(config, [pid], ready=True))
        if heartbeat and all(v.ok for v in verdicts):
            try:
                pids = checks.pidfile_pids(pidfile) if pidfile else None
            except LookupError as exc:  # it ended meanwhile
                return checks.Health(False, str(exc))
            verdicts.append(checks.check_workers(
                client, hostname=hostname or checks.this_host(config), pids=pids, identity=identity,
                max_age=max_age if max_age is not None else checks.default_max_age(config)))
    failed = [v for v in verdicts if not v.ok]
    return failed[0] if failed else checks.Health(True, "; ".join(v.reason for v in verdicts))
