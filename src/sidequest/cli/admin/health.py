"""`sidequest health`: a container's readiness or liveness, for exec probes: exit 0 healthy,
1 not, with one line saying why (see `sidequest.api.health`)."""

from __future__ import annotations

import click

from sidequest.cli.admin.connect import AdminCommand, redis_url_option
from sidequest.cli.root import UserError, main
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisURLError


@main.command(cls=AdminCommand)
@click.option("--readiness", is_flag=True, help="Redis answers and takes writes (the check when none is named).")
@click.option("--liveness", is_flag=True,
              help="This host's worker process has a fresh heartbeat (by default any one of this hostname).")
@click.option("-P", "--pidfile", type=click.Path(dir_okay=False),
              help="Liveness of the worker that wrote this pidfile (`worker -P`), or of its children "
                   "under --processes.")
@click.option("--identity", metavar="ID", help="Liveness of this one worker process (see `sidequest processes`).")
@click.option("--hostname", metavar="NAME",
              help="The host whose workers count (default: the hostname setting, else this machine's name).")
@click.option("--max-age", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Oldest heartbeat that is fresh (default: 6 heartbeat intervals, at most the heartbeat "
                   "TTL: 30 s with the default settings).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
              metavar="SECONDS", help="How long to wait for Redis.")
@redis_url_option
def health(readiness: bool, liveness: bool, pidfile: str | None, identity: str | None, hostname: str | None,
           max_age: float | None, timeout: float, redis_url: str | None) -> None:
    """Check health for a container probe: exit 0 if healthy, 1 if not, with one line saying why.

    \b
    Examples:
      sidequest health --readiness                          # Redis answers and takes writes
      sidequest health --liveness --pidfile /tmp/worker.pid # that worker (and its children) beat
      sidequest health --liveness                           # a worker of this host beats
    Liveness reads the heartbeats from Redis, so it fails while Redis is down too.
    """
    from sidequest.api import health as checks

    chosen = [name for name, value in (("--pidfile", pidfile), ("--identity", identity),
                                       ("--hostname", hostname), ("--max-age", max_age)) if value is not None]
    if chosen and not liveness:
        raise UserError(f"{chosen[0]} applies to the liveness check: add --liveness")
    if pidfile and identity:
        raise UserError("give either --pidfile or --identity, not both")
    try:
        config = Config.from_env()
        if redis_url:
            config = config.replace(redis_url=redis_url)
        client = checks.probe_client(config, timeout)
    except (ConfigError, RedisURLError) as exc:
        raise UserError(str(exc)) from None
    verdicts = []
    if readiness or not liveness:
        verdicts.append(checks.check_redis(client, write=True))
    if liveness and all(v.ok for v in verdicts):
        try:
            pids = checks.pidfile_pids(pidfile) if pidfile else None
        except LookupError as exc:
            verdicts.append(checks.Health(False, str(exc)))
        else:
            verdicts.append(checks.check_workers(
                client, hostname=hostname or checks.this_host(config), pids=pids, identity=identity,
                max_age=max_age if max_age is not None else checks.default_max_age(config)))
    failed = [v for v in verdicts if not v.ok]
    if failed:
        click.echo(f"unhealthy: {failed[0].reason}")
        raise SystemExit(1)
    click.echo("ok: " + "; ".join(v.reason for v in verdicts))
