"""`sidequest worker`: settings from flags, file and environment, job modules, then one
worker process (or a supervisor of several) until INT or TERM; (through `signals`) the only
place that maps OS signals to a launcher's methods.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import importlib.util
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import click
import redis

from sidequest import __version__
from sidequest.cli.logs import configure_logging
from sidequest.cli.pidfile import pidfile as held_pidfile
from sidequest.cli.root import UserError, main
from sidequest.client.sync_client import configure_unless_set
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisUnavailableError, SidequestError
from sidequest.store.connection import check_server, connect, mask_url
from sidequest.store.reasons import reason
from sidequest.store.urls import check_url
from sidequest.worker.signals import SignalPipe
from sidequest.worker.supervisor import CONFIG_EXIT, shared_capsules

log = logging.getLogger("sidequest")

BANNER = r"""
   ___ _    _                         _
  / __(_)__| |___ __ _ _  _ ___ ___| |_
  \__ \ / _` / -_) _` | || / -_|_-<  _|
  |___/_\__,_\___\__, |\_,_\___/__/\__|
                    |_|   Sidekiq's wire format, in Python
"""


SAME_STOP = 1.0  # seconds within which a second stop signal is the same stop
SUPERVISOR_TIMEOUT = 5.0  # seconds a supervisor's Redis call may take

def check_folder(flag: str, path: str | None) -> None:
    if path and not Path(path).resolve().parent.is_dir():
        raise UserError(f"{flag} {path}: the folder {Path(path).resolve().parent} does not exist; create it first")


def require(module: str) -> None:
    """Import a module by dotted name, or a .py file by path, so its jobs register.

    A file is imported under its real dotted name: `-r app/jobs/mail.py` inside the package
    `app.jobs` imports `app.jobs.mail` (with the package's parent folder on the path), so its
    jobs get the same names as with `-r app.jobs.mail`, the names clients push.

    A module that does not exist raises ModuleNotFoundError; one that raised while importing
    (an import of its own that fails included), ConfigError naming the error and where.
    """
    given = module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if module.endswith(".py") or os.sep in module:
        path = Path(module).resolve()
        if not path.is_file():
            raise ConfigError(f"-r {module}: no such file")
        module, root = dotted_name(path)
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(f"{exc.name}.")):
            raise  # the -r name itself (or its package) is not there
        raise import_failure(given, exc) from exc
    except Exception as exc:
        raise import_failure(given, exc) from exc


def import_failure(given: str, exc: Exception) -> ConfigError:
    """One line: the error a -r module raised while importing, and the file and line it came from."""
    log.debug("importing -r %s failed", given, exc_info=exc)
    detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return ConfigError(f"-r {given}: importing it raised {type(exc).__name__}: {detail}{raised_at(exc)} "
                       "(-v shows the traceback)")


def raised_at(exc: Exception) -> str:
    """` at FILE, line N`, where `exc` was raised, and the -r module's own line that led there."""
    if isinstance(exc, SyntaxError) and exc.filename:  # raised by the compiler, not by a frame
        return f" at {exc.filename}, line {exc.lineno}"
    machinery = (__file__, importlib.__file__)  # require() and import_module() themselves
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename not in machinery and not f.filename.startswith("<frozen ")]
    if not frames:
        return ""
    text = f" at {frames[-1].filename}, line {frames[-1].lineno}"
    if frames[0].filename != frames[-1].filename:
        text += f" (from {frames[0].filename}, line {frames[0].lineno})"
    return text


def dotted_name(path: Path) -> tuple[str, Path]:
    """(`pkg.sub.mod`, folder holding `pkg`) for a .py file, walking up through `__init__.py`s."""
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def build_config(config_file: str | None, **flags: Any) -> Config:
    config = Config.from_env()
    if config_file:
        config = config.merge_file(config_file)
    return config.replace(**{k: v for k, v in flags.items() if v not in (None, ())})


class ProcessCount(click.ParamType):  # type: ignore[type-arg]  # generic in click 8.2+ only
    """`--processes`: "auto" or a whole number >= 0."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit():
            return int(text)
        self.fail(f"{value!r} is not 'auto' or a whole number of processes (0: one, without a supervisor)",
                  param, ctx)


@main.command()
@click.option("-r", "--require", "requires", multiple=True, metavar="MODULE",
              help="Module (or .py file) that defines jobs; repeatable.")
@click.option("-q", "--queue", "queues", multiple=True, metavar="NAME[,WEIGHT]",
              help="Queue to work; repeatable. No weights: strict order. Weights: weighted random.")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), help="Processor threads (default 10).")
@click.option("-t", "--timeout", type=click.FloatRange(min=0, min_open=True),
              help="Seconds running jobs get to finish on shutdown (default 25).")
@click.option("-C", "--config", "config_file", type=click.Path(dir_okay=False),
              help="YAML file in the shape of a sidekiq.yml.")
@click.option("--redis-url", metavar="URL", help="Redis to use (default: REDIS_URL, else the embedded one).")
@click.option("--tag", help="Tag shown for this process (Sidekiq's Web UI shows it).")
@click.option("--fetch", type=click.Choice(["reliable", "basic"]), help="Fetch strategy (default reliable).")
@click.option("--runner", type=click.Choice(["auto", "threads", "asyncio"]),
              help="How jobs run: threads, or asyncio (async def jobs on one event loop); auto (the "
                   "default) picks asyncio when every registered job is async def.")
@click.option("--async-jobs", type=click.IntRange(min=1),
              help="Jobs in flight on the event loop of the asyncio runner (default 100).")
@click.option("--prefetch", type=click.IntRange(min=0),
              help="Jobs a process may keep in hand beyond those running, while jobs are short "
                   "(default twice -c; 0: fetch only for idle threads).")
@click.option("--heartbeat-interval", type=float, help="Seconds between heartbeats (default 5).")
@click.option("--heartbeat-ttl", type=float, help="Seconds of silence after which a process counts as dead (60).")
@click.option("--recovery-interval", type=float, help="Seconds between orphaned-job recoveries (15).")
@click.option("--max-recoveries", type=click.IntRange(min=0), help="Recoveries before a job goes to dead (3).")
@click.option("--job-timeout", type=float, help="Default time limit of a job, in seconds (none).")
@click.option("--poll-interval", type=float, help="Longest wait of the poller (1).")
@click.option("--processes", type=ProcessCount(),
              help="Worker processes under a supervisor that restarts them: 'auto' (the default) one per "
                   "CPU when there are two or more; 0 one process, no supervisor; or how many.")
@click.option("--max-jobs", type=click.IntRange(min=1), help="A worker process restarts after this many jobs.")
@click.option("--max-memory", type=click.FloatRange(min=0, min_open=True),
              help="A worker process restarts once its memory passes this many MB.")
@click.option("--swarm-child", is_flag=True, hidden=True)
@click.option("--swarm-error-file", hidden=True, type=click.Path(dir_okay=False))
@click.option("--swarm-slot", hidden=True, type=int)
@click.option("--swarm-lifeline", hidden=True, type=int)
@click.option("--swarm-size", hidden=True, type=int)
@click.option("--swarm-nonce", hidden=True)
@click.option("--pin-cpu/--no-pin-cpu", default=None,
              help="Keep each worker process on one CPU (default: each --processes child on its own, "
                   "a single process free).")
@click.option("-v", "--verbose", is_flag=True, default=None, help="Debug logging (--log-level debug).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="info (default) logs each job's start and end; warning keeps only problems.")
@click.option("--log-format", type=click.Choice(["text", "json"], case_sensitive=False),
              help="text (default) or one JSON object per line.")
@click.option("-L", "--logfile", type=click.Path(dir_okay=False), help="Log to this file instead of stdout.")
@click.option("-P", "--pidfile", type=click.Path(dir_okay=False),
              help="Write the process id here; refused while the process it names runs.")
@click.option("--health-port", type=click.IntRange(1, 65535), metavar="PORT",
              help="Serve GET /live and GET /ready on this port for probes (default: off; under --processes "
                   "the supervisor answers for every worker process).")
@click.option("--health-host", metavar="ADDRESS", help="Address of --health-port (default 0.0.0.0).")
def worker(requires: tuple[str, ...], queues: tuple[str, ...], concurrency: int | None,
           timeout: float | None, config_file: str | None, redis_url: str | None, tag: str | None,
           fetch: str | None, runner: str | None, async_jobs: int | None, prefetch: int | None,
           heartbeat_interval: float | None, heartbeat_ttl: float | None, recovery_interval: float | None,
           max_recoveries: int | None, job_timeout: float | None, poll_interval: float | None,
           processes: int | str | None, max_jobs: int | None, max_memory: float | None, swarm_child: bool,
           swarm_error_file: str | None, swarm_slot: int | None, swarm_lifeline: int | None,
           swarm_size: int | None, swarm_nonce: str | None, pin_cpu: bool | None, verbose: bool | None,
           log_level: str | None, log_format: str | None, logfile: str | None, pidfile: str | None,
           health_port: int | None, health_host: str | None) -> None:
    """Run jobs from Redis until INT or TERM.

    \b
    Examples:
      sidequest worker -r myapp.jobs
      sidequest worker -r myapp.jobs -q critical,3 -q default,1 -c 20
      sidequest worker -C config/sidekiq.yml
    Signals: TERM/INT stop (jobs get --timeout seconds, the rest go back to their queues),
    a second TERM/INT stops at once (running jobs go back to their queues); TSTP quiet (finish
    running jobs, take no new ones), TTIN log every thread's stack.
    """
    try:
        config = build_config(config_file, redis_url=redis_url, require=requires, queues=queues,
                              concurrency=concurrency,
                              timeout=timeout, tag=tag, fetch=fetch, runner=runner, async_jobs=async_jobs,
                              prefetch=prefetch,
                              heartbeat_interval=heartbeat_interval,
                              heartbeat_ttl=heartbeat_ttl, recovery_interval=recovery_interval,
                              max_recoveries=max_recoveries, job_timeout=job_timeout,
                              poll_interval=poll_interval, processes=processes, max_jobs=max_jobs,
                              max_memory=max_memory, pin_cpu=pin_cpu, verbose=verbose, log_level=log_level,
                              log_format=log_format,
                              logfile=logfile, pidfile=pidfile, health_port=health_port,
                              health_host=health_host)
        if swarm_child:
            # the supervisor owns the pidfile and the health port; replace() ignores None, hence
            # dataclasses.replace
            config = dataclasses.replace(config, processes=0, pidfile=None, health_port=None)
            if swarm_slot is not None and swarm_size:  # a capsule's concurrency is the fleet's
                config = shared_capsules(config, swarm_slot, swarm_size)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    check_folder("-L/--logfile", config.logfile)
    check_folder("-P/--pidfile", config.pidfile)
    with held_pidfile(config.pidfile):  # the supervisor's under --processes; a child has none
        configure_logging(config.verbose, config.logfile, config.log_level, config.log_format, url=config.url)
        count = config.worker_processes()
        if count >= 1:
            code = run_supervisor(config, count)
        else:
            code = run_worker(config, swarm_child, swarm_error_file, swarm_slot, swarm_lifeline, swarm_nonce)
    sys.exit(code)


def run_supervisor(config: Config, count: int) -> int:
    """Check the server once, as a worker process would, then start the children: a wrong
    REDIS_URL is one line and a fast exit, not a fleet of children failing and restarting."""
    from sidequest.store.dev_server import resolve_url
    from sidequest.worker.supervisor import run_swarm

    try:
        check_url(config.url)
        url = resolve_url(config)
        # PING: refused, or not a Redis server. A short timeout: the supervisor's loop makes the
        # calls that put back a dead child's jobs, and must not hang on a Redis that hangs.
        client = connect(url, socket_timeout=SUPERVISOR_TIMEOUT)
        check_server(client, url)  # its version; each child logs the warnings (eviction policy)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    except RedisUnavailableError as exc:
        log.error("%s", exc)
        return 1
    except (redis.RedisError, OSError) as exc:  # the INFO after a PING that answered
        log.error("cannot check Redis at %s: %s", mask_url(config.url), reason(exc))
        return 1
    argv = sys.argv[sys.argv.index("worker") + 1:] if "worker" in sys.argv else []
    return run_swarm(count, argv, config.replace(redis_url=url), client)


def pin_to_cpu(setting: bool | None, slot: int | None) -> None:
    """Keep this process's threads on one CPU. They take turns on the GIL, and handing it from a
    thread on one core to a thread on another costs more than a no-op job's own work (about three
    times the CPU per job on a 2-core VM; see docs/performance.md). A `--processes` child (`slot`)
    takes a core of its own by default; a single process only when asked, since a job's C code that
    releases the GIL (compression, numpy) may want the other cores."""
    if setting is False or (setting is None and slot is None) or not hasattr(os, "sched_setaffinity"):
        return
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return
    cpu = allowed[(slot if slot is not None else len(allowed) - 1) % len(allowed)]
    os.sched_setaffinity(0, {cpu})  # before any thread starts: every thread inherits it
    log.info("worker process pinned to CPU %d", cpu)


def run_worker(config: Config, swarm_child: bool = False, error_file: str | None = None,
               slot: int | None = None, lifeline_fd: int | None = None, nonce: str | None = None) -> int:
    from sidequest.store.dev_server import resolve_url
    from sidequest.worker.launcher import Launcher, run_worker_hooks
    from sidequest.worker.supervisor import Lifeline

    lifeline = Lifeline(lifeline_fd) if lifeline_fd is not None else None
    if lifeline is not None and lifeline.supervisor_gone():  # it died before we could ask to follow it
        log.warning("the supervisor is gone; not starting")
        return 0

    def cannot_start(message: str, exc: BaseException | None = None, code: int = 1, setting: bool = False) -> int:
        """Log why (exit `code`); a supervisor's child also writes it to the file the supervisor
        reads, and for a `setting` to fix exits CONFIG_EXIT, leaving the one line to the supervisor."""
        if error_file:
            Path(error_file).write_text(message + "\n", encoding="utf-8")
        if swarm_child and error_file and setting:
            return CONFIG_EXIT
        log.error("%s", message, exc_info=exc)
        return code

    pin_to_cpu(config.pin_cpu, slot if swarm_child else None)
    try:
        for module in config.require:
            require(module)
    except SidequestError as exc:
        return cannot_start(str(exc), setting=True)
    except ModuleNotFoundError as exc:  # the module itself is missing: one line, with the fix
        return cannot_start(f"cannot import required module: {exc}; check the -r name and that its "
                            "folder is the current directory or on PYTHONPATH", setting=True)
    except Exception as exc:  # the module raised while importing: its traceback helps
        return cannot_start(f"cannot import required module: {type(exc).__name__}: {exc}", exc)
    try:
        url = resolve_url(config)
        config = config.replace(redis_url=url)
        setup = run_worker_hooks(config)
        launcher = Launcher(config, death_handlers=setup.death_handlers, error_handlers=setup.error_handlers,
                            recycle_on_timeout=swarm_child, nonce=nonce)
        configure_unless_set(config)  # jobs that push jobs, or use sidequest.redis(), reach this Redis
    except ConfigError as exc:  # a wrong setting (a bad Redis URL included): the user's to fix
        return cannot_start(str(exc), code=2, setting=True)
    except RedisUnavailableError as exc:
        return cannot_start(str(exc))
    pipe = SignalPipe()
    # What exists now (the app, its jobs, the libraries) lives as long as the process: kept out
    # of the cyclic collector's passes, which otherwise walk all of it again and again while jobs
    # make short-lived objects (about a sixth of the asyncio runner's CPU per no-op job).
    gc.collect()
    gc.freeze()
    try:
        launcher.run()
    except ConfigError as exc:
        return cannot_start(str(exc), code=2, setting=True)
    except RedisUnavailableError as exc:
        return cannot_start(str(exc))
    if sys.stdout.isatty() or config.verbose:
        print(BANNER)
    queues = ", ".join(f"{n},{w}" if w else n for n, w in config.queues)
    runs = (f"asyncio runner: {config.async_jobs} jobs in flight" if launcher.runner == "asyncio"
            else f"concurrency={config.concurrency}")
    log.info("sidequest %s starting: redis=%s queues=[%s] %s fetch=%s identity=%s",
             __version__, mask_url(config.url), queues, runs, config.fetch, launcher.identity)
    for capsule in config.capsules:
        log.info("capsule %s: queues=[%s] concurrency=%d", capsule.name,
                 ", ".join(f"{n},{w}" if w else n for n, w in capsule.weighted), capsule.concurrency)
    names = launcher.runtime.registry.names()
    if names:
        log.info("%d job(s) registered: %s", len(names), ", ".join(names))
    else:
        log.warning("no jobs are registered: pass -r with the module that defines your jobs")
    stop_asked: float | None = None
    while not launcher.wait(0):
        for action in pipe.wait(0.5):
            if action == "stop":
                # A stop signal within a second of the first is the same stop arriving twice
                # (a group's Ctrl-C or a service manager's TERM, plus the supervisor's); a
                # later one is an operator asking for "now".
                if stop_asked is None:
                    stop_asked = time.monotonic()
                    launcher.request_stop()
                elif time.monotonic() - stop_asked >= SAME_STOP:
                    launcher.stop_now()
            elif action == "quiet":
                launcher.quiet()
            elif action == "dump":
                launcher.dump_threads()
        if stop_asked is None and lifeline is not None and lifeline.supervisor_gone():
            log.warning("the supervisor is gone (killed?); stopping this worker process")
            stop_asked = time.monotonic()
            launcher.request_stop()
    return 0
