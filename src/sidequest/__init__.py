"""sidequest: background jobs for Python on Redis, in Sidekiq's wire format.

    import sidequest

    @sidequest.job(queue="mail")
    def send_welcome(user_id): ...

    send_welcome.perform_async(42)

Run them with `sidequest worker -r myapp.jobs`.
"""

# ruff: noqa: E402  (redis-py is imported by `_import_redis()`, before the imports below)

__version__ = "0.1.0"  # first: modules below read it


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
from typing import TYPE_CHECKING, Any, Unpack

from . import aio
from .aio import AsyncClient
from .cancellation import cancel, cancelled
from .client import Client, configure, default_client
from .client import redis_for_jobs as redis
from .config import Capsule, Config
from .errors import (
    Cancelled,
    ConfigError,
    JobArgumentError,
    JobDefinitionError,
    JobFailed,
    JobTimeoutError,
    NoResultError,
    OverLimit,
    PayloadError,
    RedisUnavailableError,
    SidequestError,
    UnknownJobError,
)
from .job import Job, JobFunction, job
from .launcher import WorkerSetup, configure_worker
from .lookup import result, status
from .middleware import Chain
from .options import JobOptions
from .periodic import periodic
from .registry import Registry, default_registry
from .tasks import Task, task_message
from .workflows import Signature, Workflow, chain, chord, group, workflow

if TYPE_CHECKING:
    from . import iteration, limiter
    from .iteration import IterableJob

# Imported on first use (`sidequest.limiter`, `sidequest.IterableJob`...): a worker none of whose
# jobs iterates or limits never loads them. name -> the module holding it
_LAZY = {"iteration": ".iteration", "limiter": ".limiter", "IterableJob": ".iteration"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if _LAZY[name] == f".{name}" else getattr(module, name)
    globals()[name] = value
    return value


def push(job_name: str, args: list[Any], **options: Unpack[JobOptions]) -> str | None:
    """Push a job by name with the default client (e.g. a Ruby job: `push("HardWorker", [1])`)."""
    return default_client().push(job_name, args, **options)


__all__ = [
    "AsyncClient",
    "Cancelled",
    "Capsule",
    "Chain",
    "Client",
    "Config",
    "ConfigError",
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
    "SidequestError",
    "Signature",
    "Task",
    "UnknownJobError",
    "WorkerSetup",
    "Workflow",
    "aio",
    "cancel",
    "cancelled",
    "chain",
    "chord",
    "configure",
    "configure_worker",
    "default_client",
    "default_registry",
    "group",
    "iteration",
    "job",
    "limiter",
    "periodic",
    "push",
    "redis",
    "result",
    "status",
    "task_message",
    "workflow",
]
