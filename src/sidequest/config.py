"""One frozen configuration object, validated when it is built.

Build it in code (`Config(concurrency=5)`), from the environment (`Config.from_env()`, the only
place sidequest reads `os.environ`), from a `sidekiq.yml`-shaped YAML file (`Config.from_file`),
or layer them: `Config.from_env().replace(**cli_flags)`.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sidequest.errors import ConfigError
from sidequest.jobs.middleware import PROCESS_CLIENT, PROCESS_SERVER, Chain
from sidequest.store.urls import check_url

log = logging.getLogger(__name__)

DEFAULT_REDIS_PORT = 6379
LOG_LEVELS = ("debug", "info", "warning", "error")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
CAPSULE_NAME = re.compile(r"[A-Za-z0-9_-]+")  # it names a reserved list (see keys.capsule_batch)
DEFAULT_CAPSULE = "default"
RUNNERS = ("auto", "threads", "asyncio")
ENV_PREFIX = "SIDEQUEST_"
# SIDEQUEST_* variables that are not settings: `sidequest web`'s flags (SIDEQUEST_WEB_*), the test suite's knobs
OTHER_VARIABLES = ("SIDEQUEST_REQUIRE_BROWSER", "SIDEQUEST_REQUIRE_RUBY")
OTHER_PREFIXES = ("SIDEQUEST_WEB_", "SIDEQUEST_TEST_")
_warned: set[str] = set()  # unknown variables already named: once per process, however often read


def check_queue_name(name: Any, what: str = "queue name") -> str:
    """Return `name` if it is a usable queue name, else raise ConfigError saying why.

    Every name Ruby Sidekiq accepts works (spaces, `:`, any Unicode, any length), so a Ruby
    app's queues can be worked; only an empty name and control characters are refused.
    """
    if not isinstance(name, str):
        raise ConfigError(f"{what} must be a string, got {type(name).__name__}")
    if not name or CONTROL.search(name) or _not_utf8(name):
        raise ConfigError(f"{what} {name!r} is not valid: it must be non-empty text, without control characters")
    return name


def _not_utf8(text: str) -> bool:
    """Lone surrogates (from undecodable bytes in argv or file names) cannot be sent to Redis."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_queue_spec(spec: Any) -> tuple[str, int]:
    """`"critical"`, `"critical,3"`, `["critical", 3]` -> ("critical", 3); weight 0 means unweighted."""
    if isinstance(spec, str):
        name, _, given = spec.partition(",")  # as Sidekiq's -q (a name with a comma: use a list)
        spec = [name, given.strip() or 0]
    if not isinstance(spec, (list, tuple)) or not 1 <= len(spec) <= 2:
        raise ConfigError(f"queue {spec!r} must be NAME or [NAME, WEIGHT]")
    name = check_queue_name(spec[0])
    raw_weight = spec[1] if len(spec) == 2 else 0
    try:
        weight = int(raw_weight)
    except (TypeError, ValueError):
        hint = ""
        if isinstance(raw_weight, str) and raw_weight.strip():  # "mail,default": meant two queues
            hint = (f" (NAME,WEIGHT). To work several queues, separate them with spaces: "
                    f"SIDEQUEST_QUEUES='{name} {raw_weight.strip()}' or -q {name} -q {raw_weight.strip()}")
        raise ConfigError(f"queue {name!r} has weight {raw_weight!r}; a weight is a whole number{hint}") from None
    if weight < 0:
        raise ConfigError(f"queue {name!r} has negative weight {weight}")
    return name, weight


@dataclass(frozen=True)
class Capsule:
    """A named group of processor threads in a worker process, with queues of its own (Sidekiq
    7's capsules): `Capsule("serial", queues=["ledger"], concurrency=1)` runs the `ledger`
    queue's jobs one at a time, beside the process's own `queues` and `concurrency` (the
    capsule named "default"). `queues` take the shapes of `Config.queues`: NAME, "NAME,WEIGHT"
    or (NAME, WEIGHT); they are kept as (name, weight) pairs."""

    name: str
    queues: Sequence[str | tuple[str, int]]
    concurrency: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not CAPSULE_NAME.fullmatch(self.name):
            raise ConfigError(f"capsule name {self.name!r} must be letters, digits, '_' or '-'")
        if self.name == DEFAULT_CAPSULE:
            raise ConfigError("capsule 'default' is the process's own queues and concurrency: set those instead")
        where = f"capsule {self.name!r}"
        if isinstance(self.queues, str) or not isinstance(self.queues, Sequence) or not self.queues:
            raise ConfigError(f"{where}: queues must be a non-empty list of queue names")
        pairs = tuple(parse_queue_spec(q) for q in self.queues)
        object.__setattr__(self, "queues", pairs)
        _check_weights(pairs, where)
        _positive_int(f"{where}: concurrency", self.concurrency)

    @property
    def weighted(self) -> tuple[tuple[str, int], ...]:
        """The queues as (name, weight) pairs."""
        return cast("tuple[tuple[str, int], ...]", self.queues)

    @classmethod
    def from_mapping(cls, name: Any, spec: Any) -> Capsule:
        """One entry of a config file's `capsules:` mapping: `{queues: [...], concurrency: N}`."""
        if not isinstance(spec, Mapping):
            raise ConfigError(f"capsule {name!r} must be a mapping with queues: and concurrency:")
        given = {str(key).lstrip(":"): value for key, value in spec.items()}
        unknown = sorted(set(given) - {"queues", "concurrency"})
        if unknown:
            raise ConfigError(f"capsule {name!r}: unknown key(s) {', '.join(unknown)}; known: queues, concurrency")
        if "queues" not in given:
            raise ConfigError(f"capsule {name!r}: queues: is required")
        queues = given["queues"]
        return cls(str(name).lstrip(":"), [queues] if isinstance(queues, str) else queues,
                   given.get("concurrency", 1))


@dataclass(frozen=True)
class Config:
    """Everything a client or worker needs to know. Times are seconds."""

    redis_url: str | None = field(default=None, repr=False)  # None: localhost or the embedded server; repr: a password
    queues: tuple[tuple[str, int], ...] = (("default", 0),)
    concurrency: int = 10
    timeout: float = 25.0  # shutdown deadline for running jobs
    tag: str = ""
    hostname: str | None = None  # the host part of this worker's identity; None: the machine's name
    labels: tuple[str, ...] = ()
    fetch: str = "reliable"  # "reliable" keeps taken jobs until acknowledged; "basic" is BRPOP
    # how the process's own queues run: "threads" (`concurrency` processor threads), "asyncio"
    # (`async_jobs` jobs in flight on one event loop, see `worker.asyncio_runner`), or "auto": asyncio when
    # every job the worker runs is `async def`, else threads
    runner: str = "auto"
    async_jobs: int = 100
    # jobs a process keeps in hand beyond those running, at most (see `worker.fetch.batch`): None, twice
    # `concurrency`; 0 none (a processor fetches only when it is idle)
    prefetch: int | None = None
    fetch_timeout: float = 2.0  # bound on a blocking fetch, so stops are noticed
    poll_interval: float = 1.0  # longest the poller sleeps when nothing is due
    heartbeat_interval: float = 5.0
    heartbeat_ttl: float = 60.0  # a process silent this long counts as dead
    recovery_interval: float = 15.0
    max_recoveries: int = 3
    job_timeout: float | None = None  # worker default for the `timeout` job option
    # seconds a job's state and return value are kept (`sidequest.result`) when it has no `result_ttl`
    # option: the default of the jobs this process pushes; None keeps them only for jobs that ask
    result_ttl: float | None = None
    max_retries: int = 25
    dead_max_jobs: int = 10_000
    dead_timeout: float = 180 * 24 * 3600.0
    task_retention: float = 7 * 24 * 3600.0  # how long a completed task's records are kept
    task_ttl: float = 7 * 24 * 3600.0  # ... and an unfinished one's, after its last change
    periodic_ttl: float = 7 * 24 * 3600.0  # a periodic entry no scheduler describes is forgotten after this
    max_payload_size: int = 16 * 1024 * 1024  # bytes; a bigger job is refused at push
    # a push waits until this many replicas hold it (Redis WAIT), at most wait_timeout seconds,
    # or raises NotReplicatedError: for jobs that must survive a failover (docs/deployment.md)
    wait_replicas: int = 0
    wait_timeout: float = 1.0
    sidekiq_version: int = 7  # payload times written: 6 or 7 float seconds, 8 integer milliseconds
    embedded_dir: str = ".sidequest"
    embedded_port: int = DEFAULT_REDIS_PORT
    # how many worker processes `sidequest worker` runs: None ("auto", the default) one per CPU it
    # may use, under a supervisor, when there are two or more, else one; 0 one process and no
    # supervisor; 1 or more a supervisor that runs (and restarts) that many (see `worker_processes`)
    processes: int | None = None
    # pin a worker process's threads to one CPU: None pins each `processes` child to a core of its
    # own and leaves a single process free; True pins a single process too; False never pins
    pin_cpu: bool | None = None
    max_jobs: int | None = None  # a worker process restarts itself after this many jobs
    max_memory: float | None = None  # ... or once its resident memory passes this many MB
    require: tuple[str, ...] = ()
    verbose: bool = False  # the same as log_level "debug"
    log_level: str = "info"  # debug | info (a line per job start and end, as Sidekiq) | warning | error
    log_format: str = "text"  # text | json (one JSON object per line)
    logfile: str | None = None
    pidfile: str | None = None
    health_port: int | None = None  # GET /live and /ready on it (None: off); under `processes`, the supervisor's
    health_host: str = "0.0.0.0"
    liveness_timeout: float = 60.0  # seconds the event loop or a background thread may be stuck, still live
    health_dir: str | None = None  # for `sidequest health --live`'s files; None: $TMPDIR/sidequest-<uid>
    # periodic jobs from the config file (`:periodic:`), shape-checked here, parsed by `periodic`
    periodic: tuple[dict[str, Any], ...] = field(default=(), hash=False)
    # more groups of threads beside the default one (`queues`, `concurrency`): see `Capsule`;
    # a file's `capsules:` mapping ({name: {queues: [...], concurrency: N}}) is read into these
    capsules: tuple[Capsule, ...] = ()
    # each runs the process-wide links (`middleware.PROCESS_CLIENT`/`PROCESS_SERVER`) around its own
    client_middleware: Chain = field(default_factory=lambda: Chain(PROCESS_CLIENT), compare=False)
    server_middleware: Chain = field(default_factory=lambda: Chain(PROCESS_SERVER), compare=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> Config:
        """A misspelled keyword is a ConfigError naming the nearest setting, not a bare TypeError."""
        for name in kwargs:
            if name not in SETTINGS:
                raise ConfigError(f"unknown setting {name!r}{did_you_mean(name)}")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if not self.queues:
            raise ConfigError("at least one queue is needed")
        if self.redis_url is not None:
            check_url(self.redis_url)  # a wrong scheme or database fails here, not at the first push
        queues = tuple(parse_queue_spec(q) for q in self.queues)
        object.__setattr__(self, "queues", queues)
        _check_weights(queues, "")
        object.__setattr__(self, "capsules", check_capsules(self.capsules, queues))
        if str(self.processes).lower() == "auto":  # the file's and the flag's spelling of the default
            object.__setattr__(self, "processes", None)
        for name in ("concurrency", "async_jobs", "max_recoveries", "max_retries", "dead_max_jobs", "embedded_port",
                     "processes", "max_payload_size", "wait_replicas"):
            if name != "processes" or self.processes is not None:
                _positive_int(name, getattr(self, name),
                              allow_zero=name in ("max_recoveries", "max_retries", "processes", "wait_replicas"))
        for name in ("timeout", "fetch_timeout", "poll_interval", "heartbeat_interval",
                     "heartbeat_ttl", "recovery_interval", "dead_timeout", "task_retention",
                     "task_ttl", "periodic_ttl", "wait_timeout", "liveness_timeout"):
            _positive_number(name, getattr(self, name))
        for name in ("job_timeout", "max_memory", "result_ttl"):
            if getattr(self, name) is not None:
                _positive_number(name, getattr(self, name))
        if self.max_jobs is not None:
            _positive_int("max_jobs", self.max_jobs)
        if self.prefetch is not None:
            _positive_int("prefetch", self.prefetch, allow_zero=True)
        if self.health_port is not None and (type(self.health_port) is not int or not 0 < self.health_port < 65536):
            raise ConfigError(f"health_port must be a TCP port, 1 to 65535; got {self.health_port!r}")
        if self.hostname is not None and (not self.hostname or any(c in self.hostname for c in ": \t\n")):
            raise ConfigError(f"hostname must be a name without ':' or spaces; got {self.hostname!r}")
        if isinstance(self.log_level, str):  # WARNING and warning alike, as Python's logging
            object.__setattr__(self, "log_level", self.log_level.lower())
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"log_level must be one of {', '.join(LOG_LEVELS)}; got {self.log_level!r}")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log_format must be 'text' or 'json'; got {self.log_format!r}")
        if self.fetch not in ("reliable", "basic"):
            raise ConfigError(f"fetch must be 'reliable' or 'basic', got {self.fetch!r}")
        if self.runner not in RUNNERS:
            raise ConfigError(f"runner must be one of {', '.join(RUNNERS)}; got {self.runner!r}")
        if type(self.sidekiq_version) is not int or self.sidekiq_version not in (6, 7, 8):
            raise ConfigError(f"sidekiq_version must be 6, 7 or 8, got {self.sidekiq_version!r}")
        if self.heartbeat_ttl <= self.heartbeat_interval:
            raise ConfigError("heartbeat_ttl must be longer than heartbeat_interval")
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "require", tuple(self.require))
        object.__setattr__(self, "periodic", check_periodic(self.periodic))

    # -- derived -------------------------------------------------------------------------------
    @property
    def strict(self) -> bool:
        """Strict order when no queue has a weight (Sidekiq's rule)."""
        return all(w == 0 for _, w in self.queues)

    @property
    def queue_names(self) -> list[str]:
        return [name for name, _ in self.queues]

    @property
    def all_queue_names(self) -> list[str]:
        """The queues a worker process works, over every capsule, each once."""
        return list(dict.fromkeys([*self.queue_names, *(name for c in self.capsules for name, _ in c.weighted)]))

    @property
    def total_concurrency(self) -> int:
        """Processor threads of a worker process, over every capsule."""
        return self.concurrency + sum(c.concurrency for c in self.capsules)

    def capsule_config(self, capsule: Capsule) -> Config:
        """The configuration a capsule's processors and fetch work with: this one, with the
        capsule's queues and concurrency."""
        return dataclasses.replace(self, queues=capsule.weighted, concurrency=capsule.concurrency, capsules=())

    def worker_processes(self) -> int:
        """How many worker processes `sidequest worker` starts under a supervisor; 0: none, the
        command's own process works. "auto" (None) is one per CPU this process may run on, as
        Celery, Dramatiq and gunicorn default to: a process's threads share one GIL, so one
        process uses about one core, and a job's Python code runs faster in a process per core
        than in more threads (docs/performance.md). One CPU: a single process, no supervisor."""
        if self.processes is not None:
            return self.processes
        cpus = usable_cpus()
        return cpus if cpus > 1 else 0

    @property
    def url(self) -> str:
        """The Redis URL to use: the configured one, or localhost on the embedded port."""
        return self.redis_url or f"redis://localhost:{self.embedded_port}/0"

    # -- constructors --------------------------------------------------------------------------
    def replace(self, **changes: Any) -> Config:
        """A copy with `changes` applied (None values are ignored, so CLI flags layer cleanly)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **changes)  # an unknown name: see `__new__`

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Settings from `REDIS_URL` and `SIDEQUEST_*` variables (e.g. SIDEQUEST_CONCURRENCY)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if env.get("REDIS_URL"):
            values["redis_url"] = env["REDIS_URL"]
        names = {f.name: f for f in dataclasses.fields(cls)}
        for key, raw in env.items():
            if key.startswith(ENV_PREFIX) and key != "SIDEQUEST_REDIS_URL":
                name = key[len(ENV_PREFIX):].lower()
                if name in ENV_SETTINGS:
                    values[name] = _cast(name, raw, names[name].type)
                elif key not in OTHER_VARIABLES and not key.startswith(OTHER_PREFIXES) and key not in _warned:
                    _warned.add(key)
                    _warn_unknown(key, name)
        if env.get("SIDEQUEST_REDIS_URL"):
            values["redis_url"] = env["SIDEQUEST_REDIS_URL"]
        return cls(**values).replace(**overrides)

    def merge_file(self, path: str | os.PathLike[str]) -> Config:
        """A copy with the settings of a YAML file in the shape of a `sidekiq.yml`."""
        return self.replace(**load_file(path))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Config:
        return cls(**load_file(path))

    @classmethod
    def cast_setting(cls, name: str, raw: str) -> Any:
        """Setting `name` (a field name) read from text as its `SIDEQUEST_<NAME>` variable would be."""
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        return _cast(name, raw, kinds[name])


SETTINGS = tuple(f.name for f in dataclasses.fields(Config))
# what a SIDEQUEST_<NAME> variable can set: middleware, periodic entries and capsules are code or a file's
ENV_SETTINGS = tuple(n for n in SETTINGS if n not in ("client_middleware", "server_middleware", "periodic", "capsules"))


def nearest_setting(name: str, among: Sequence[str] = SETTINGS) -> str | None:
    """The setting `name` was most likely meant to be (`concurency` -> `concurrency`), if any."""
    close = difflib.get_close_matches(name.lower(), among, n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str) -> str:
    near = nearest_setting(name)
    return f"; did you mean {near!r}?" if near else ""


def _warn_unknown(key: str, name: str) -> None:
    """One line for a SIDEQUEST_* variable `from_env` ignores, with the one it may stand for."""
    if name in SETTINGS:
        log.warning("%s is ignored: %s is set in code or a config file, not in the environment", key, name)
        return
    near = nearest_setting(name, ENV_SETTINGS)
    log.warning("%s is not a sidequest setting and is ignored%s", key,
                f"; did you mean {ENV_PREFIX}{near.upper()}?" if near else "")


def load_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a sidekiq.yml-shaped file: `:concurrency:`, `:queues:` (names or [name, weight]), ..."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
    import yaml  # here: a worker that reads no file never loads it (0.8 MB of RSS)

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of settings")
    known = {f.name for f in dataclasses.fields(Config)} - {"client_middleware", "server_middleware"}
    values: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).lstrip(":")  # sidekiq.yml writes Ruby symbols, `:concurrency:`
        if key not in known:
            raise ConfigError(f"config file {p}: unknown setting {key!r}{did_you_mean(key)}")
        if key in ("labels", "require") and isinstance(value, str):
            value = [value]
        if key in ("queues", "labels", "require", "periodic"):
            if not isinstance(value, list):
                raise ConfigError(f"config file {p}: {key} must be a list")
            value = tuple(value)
        if key == "capsules":
            if not isinstance(value, Mapping):
                raise ConfigError(f"config file {p}: capsules must be a mapping of "
                                  "name: {queues: [...], concurrency: N}")
            value = tuple(Capsule.from_mapping(name, spec) for name, spec in value.items())
        values[key] = value
    return values


def check_capsules(items: Any, default_queues: tuple[tuple[str, int], ...]) -> tuple[Capsule, ...]:
    """The capsules, checked as a whole: distinct names, and each queue in one capsule only
    (the default capsule's queues included), so no two capsules take each other's jobs."""
    if isinstance(items, Mapping):  # {name: Capsule or {queues:, concurrency:}}, as a file gives
        items = [c if isinstance(c, Capsule) else Capsule.from_mapping(n, c) for n, c in items.items()]
    if not isinstance(items, (list, tuple)) or not all(isinstance(c, Capsule) for c in items):
        raise ConfigError("capsules must be a tuple of sidequest.Capsule (or a mapping of name to capsule)")
    owner = {name: DEFAULT_CAPSULE for name, _ in default_queues}
    for capsule in items:
        if capsule.name in {c.name for c in items if c is not capsule}:
            raise ConfigError(f"capsule {capsule.name!r} is given twice")
        for name, _ in capsule.weighted:
            if owner.setdefault(name, capsule.name) != capsule.name:
                raise ConfigError(f"queue {name!r} is in capsules {owner[name]!r} and {capsule.name!r}; "
                                  "a queue belongs to one capsule")
    return tuple(items)


def _check_weights(queues: tuple[tuple[str, int], ...], where: str) -> None:
    weights = {w for _, w in queues}
    if len(queues) > 1 and 0 in weights and weights != {0}:
        raise ConfigError(f"{where + ': ' if where else ''}give every queue a weight, or none (strict order)")


PERIODIC_KEYS = ("id", "class", "cron", "every", "tz", "args", "queue", "missed")


def check_periodic(items: Any) -> tuple[dict[str, Any], ...]:
    """The `:periodic:` entries, shape-checked: each a mapping with `class` (a job's wire name) and
    exactly one of `cron` and `every`. Schedules and zones are parsed when a worker starts."""
    if not isinstance(items, (list, tuple)):
        raise ConfigError("periodic must be a list of entries, each with class: and cron: or every:")
    checked = []
    for index, item in enumerate(items, 1):
        if not isinstance(item, Mapping):
            raise ConfigError(f"periodic entry {index} must be a mapping with class: and cron: or every:")
        entry = {str(key).lstrip(":"): value for key, value in item.items()}
        where = f"periodic entry {index} ({entry.get('class')})"
        unknown = sorted(set(entry) - set(PERIODIC_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(PERIODIC_KEYS)}")
        if not isinstance(entry.get("class"), str) or not entry["class"]:
            raise ConfigError(f"periodic entry {index}: class: (the job's name) is required")
        if ("cron" in entry) == ("every" in entry):
            raise ConfigError(f"{where}: give cron: or every:, exactly one of them")
        if not isinstance(entry.get("args", []), (list, tuple)):
            raise ConfigError(f"{where}: args must be a list")
        entry["args"] = list(entry.get("args", []))
        if entry.get("missed", "enqueue") not in ("enqueue", "skip"):
            raise ConfigError(f"{where}: missed must be enqueue or skip, got {entry['missed']!r}")
        if "queue" in entry:
            check_queue_name(entry["queue"], f"{where}: queue")
        checked.append(entry)
    return tuple(checked)


def _cast(name: str, raw: str, kind: Any) -> Any:
    text = str(kind)
    try:
        if name in ("queues", "labels", "require"):
            # one rule for every list: items separated by spaces or `;` (a queue item keeps its
            # `NAME,WEIGHT` comma); module names and labels cannot hold commas, so `,` works there too
            separators = r"[\s;]+" if name == "queues" else r"[\s;,]+"
            return tuple(part for part in re.split(separators, raw) if part)
        if name == "processes" and raw.strip().lower() == "auto":
            return "auto"
        if "bool" in text:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if text.startswith("int"):
            return int(raw)
        if "float" in text:
            return float(raw)
    except ValueError:
        raise ConfigError(f"SIDEQUEST_{name.upper()}={raw!r} is not a valid {text}") from None
    return raw


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The CPUs this process may use: its affinity (a container's cpuset, `taskset`), and no more
    than a cgroup v2 CPU quota allows (a container's `--cpus`, a Kubernetes CPU limit), rounded up."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cgroup.read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 here, or an unlimited one
        pass
    return cpus


def _positive_int(name: str, value: Any, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        floor = "0 or more" if allow_zero else "1 or more"
        raise ConfigError(f"{name} must be a whole number, {floor}; got {value!r}")


def _positive_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{name} must be a number above 0; got {value!r}")
