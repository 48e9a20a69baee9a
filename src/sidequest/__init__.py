"""sidequest: background jobs for Python on Redis, in Sidekiq's wire format.

    import sidequest

    @sidequest.job(queue="mail")
    def send_welcome(user_id): ...

    send_welcome.perform_async(42)

Run them with `sidequest worker -r myapp.jobs`.
"""

# ruff: noqa: E402  (redis-py is imported by `_import_redis()`, before the imports below)

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

# Written in one place, pyproject.toml, and read from the installed distribution (the wheel's
# METADATA, or an editable install's). First: modules below read it.
try:
    __version__ = _installed_version("sidequest")
except PackageNotFoundError:  # the sources put on sys.path by hand, never installed
    __version__ = "0+unknown"


def _import_redis() -> None:
    """Import redis-py, the first time, without the OpenTelemetry SDK's metrics package.

    redis-py 8 tries `from opentelemetry.sdk.metrics import MeterProvider` while it is imported
    (`redis.observability.providers`), which loads the SDK (and psutil, ctypes, uuid...) wherever
    opentelemetry-sdk is installed: about 3 MB of RSS in every worker process, for a name that
    module only uses in annotations (its `OTEL_AVAILABLE` flag is read nowhere, and the code that
    enables redis-py's metrics imports the SDK itself, when called). So that one module is made
    unimportable (a None entry in sys.modules) for the time of `import redis`, then importable
    again: nothing else changes. Skipped when redis or the SDK is already imported (an
    application's OpenTelemetry set up first keeps everything as it was)."""
    import sys

    hidden = "opentelemetry.sdk.metrics"
    if "redis" in sys.modules or hidden in sys.modules:
        return
    sys.modules[hidden] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import redis  # noqa: F401
    finally:
        if hidden in sys.modules and sys.modules[hidden] is None:
            del sys.modules[hidden]


_import_redis()

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Unpack

from sidequest import aio  # the documented path (a re-export of `sidequest.client.async_client`)
from sidequest.client.async_client import AsyncClient
from sidequest.client.sync_client import Client, configure, default_client
from sidequest.client.sync_client import redis_for_jobs as redis
from sidequest.config import Capsule, Config
from sidequest.errors import (
    Cancelled,
    ConfigError,
    EventError,
    JobArgumentError,
    JobDefinitionError,
    JobFailed,
    JobTimeoutError,
    NoResultError,
    OverLimit,
    PayloadError,
    RedisUnavailableError,
    Retry,
    SidequestError,
    StepError,
    Suspended,
    UnknownJobError,
    WaitTimeout,
)
from sidequest.features import registry as _features  # noqa: F401  (fills the worker's lifecycle seam)
from sidequest.features.cancellation import cancel, cancelled
from sidequest.features.lookup import result, status
from sidequest.features.steps import (
    CurrentStep,
    asleep,
    astep,
    await_for,
    current_step,
    send_event,
    sleep,
    step,
    wait_for,
)
from sidequest.features.tasks import Task, task_message
from sidequest.features.workflows import ChainResult, GroupResult, Signature, Workflow, chain, chord, group, workflow
from sidequest.jobs import active_job as _active_job
from sidequest.jobs.definition import Job, JobFunction, job
from sidequest.jobs.middleware import Chain
from sidequest.jobs.options import JobOptions
from sidequest.jobs.registry import Registry, default_registry
from sidequest.periodic import periodic  # after the module of that name, which it hides
from sidequest.worker.current import CurrentJob, current_job
from sidequest.worker.launcher import WorkerSetup, configure_worker

if TYPE_CHECKING:
    from sidequest.features import iteration, limiter
    from sidequest.features.iteration import IterableJob

# Imported on first use (`sidequest.limiter`, `sidequest.IterableJob`...): a worker none of whose
# jobs iterates or limits never loads them. name -> the module holding it
_LAZY = {"iteration": "sidequest.features.iteration", "limiter": "sidequest.features.limiter",
         "IterableJob": "sidequest.features.iteration"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if _LAZY[name].endswith(f".{name}") else getattr(module, name)
    globals()[name] = value
    return value


def push(job_name: str, args: list[Any], kwargs: Mapping[str, Any] | None = None,
         **options: Unpack[JobOptions]) -> str | None:
    """Push a job by name with the default client (e.g. a Ruby job: `push("HardWorker", [1])`).
    `kwargs` only for a registered Python job: a Ruby job's perform takes `args` alone."""
    return default_client().push(job_name, args, kwargs, **options)


def push_active_job(job_class: str, args: list[Any] | tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, *,
                    rails_priority: int | None = None, job_id: str | None = None, at: Any = None, in_: Any = None,
                    client: Client | None = None, **options: Unpack[JobOptions]) -> str | None:
    """Push a job a Rails worker runs as the ActiveJob `job_class` (Rails' Sidekiq adapter's
    wrapper); return its Sidekiq jid, the job's `provider_job_id` there. `kwargs` reach
    `perform` as Ruby keyword arguments; the arguments are serialized as ActiveJob 6.1 does
    (docs/sidekiq-compatibility.md has the table). `job_id` (the ActiveJob id) is a new UUID
    unless given; `rails_priority` is ActiveJob's own `priority` field (a Ruby Sidekiq ignores it);
    `at`/`in_` schedule it and `queue=` (default "default") and the other job options apply, as for
    `push` (`priority=` among them: sidequest's lanes, see `store.lanes`).

        sidequest.push_active_job("SendReceiptJob", [42, "eur"], {"note": "x"})
    """
    chosen = client or default_client()
    data = _active_job.job_data_for(job_class, args, kwargs, queue=options.get("queue") or "default",
                                    priority=rails_priority, job_id=job_id, now=chosen.clock())
    options["custom"] = {**options.get("custom", {}), "wrapped": job_class}
    return chosen.push(_active_job.RAILS_WRAPPER, [data], at=at, in_=in_, **options)


__all__ = [
    "AsyncClient",
    "Cancelled",
    "Capsule",
    "Chain",
    "ChainResult",
    "Client",
    "Config",
    "ConfigError",
    "CurrentJob",
    "CurrentStep",
    "EventError",
    "GroupResult",
    "IterableJob",
    "Job",
    "JobArgumentError",
    "JobDefinitionError",
    "JobFailed",
    "JobFunction",
    "JobTimeoutError",
    "NoResultError",
    "OverLimit",
    "PayloadError",
    "RedisUnavailableError",
    "Registry",
    "Retry",
    "SidequestError",
    "Signature",
    "StepError",
    "Suspended",
    "Task",
    "UnknownJobError",
    "WaitTimeout",
    "WorkerSetup",
    "Workflow",
    "aio",
    "asleep",
    "astep",
    "await_for",
    "cancel",
    "cancelled",
    "chain",
    "chord",
    "configure",
    "configure_worker",
    "current_job",
    "current_step",
    "default_client",
    "default_registry",
    "group",
    "iteration",
    "job",
    "limiter",
    "periodic",
    "push",
    "push_active_job",
    "redis",
    "result",
    "send_event",
    "sleep",
    "status",
    "step",
    "task_message",
    "wait_for",
    "workflow",
]
