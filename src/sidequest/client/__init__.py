"""Pushing jobs: the sync `Client` and the asyncio client (`sidequest.aio`), over one push plan."""

from sidequest.client.sync_client import (
    Client,
    collection_paused,
    configure,
    configure_unless_set,
    default_client,
    redis_for_jobs,
)

__all__ = ["Client", "collection_paused", "configure", "configure_unless_set", "default_client", "redis_for_jobs"]
