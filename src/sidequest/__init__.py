"""sidequest: background jobs for Python on Redis, in Sidekiq's wire format.

    import sidequest

    @sidequest.job(queue="mail")
    def send_welcome(user_id): ...

    send_welcome.perform_async(42)

Run them with `sidequest worker -r myapp.jobs`.
"""

__version__ = "0.1.0"  # first: modules below read it

from typing import Any, Unpack

from . import aio, iteration, limiter
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
from .iteration import IterableJob
from .job import Job, JobFunction, job
from .launcher import WorkerSetup, configure_worker
from .lookup import result, status
from .middleware import Chain
from .options import JobOptions
from .periodic import periodic
from .registry import Registry, default_registry
from .tasks import Task, task_message
from .workflows import Signature, Workflow, chain, chord, group, workflow


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
