"""The lifecycle of a move made outside a worker: an operator's action, a cancel.

The admin API (`api.actions`: retry, delete, kill from the API, the CLI or the dashboard) and
`cancellation` both move a stored job with one of `scripts.ADMIN_*`; the features that record
where a job is take part in that same call. This module sits below both callers, so a feature
(`cancellation`) never imports the admin API to get it.
"""

from __future__ import annotations

from sidequest.client.sync_client import Client
from sidequest.features.results import StatusFeature
from sidequest.features.tasks import TaskFeature, TaskRecorder
from sidequest.features.unique import UniqueFeature
from sidequest.features.workflows.feature import WorkflowFeature
from sidequest.worker.lifecycle import Lifecycle


def operator_lifecycle(client: Client) -> Lifecycle:
    """The features that record a move made outside a worker (an operator's action, a cancel):
    tasks, unique claims, status records and workflow steps. The per-job metrics count runs, so they are left out."""
    recorder = TaskRecorder(client.redis, client.config.task_retention, clock=client.clock,
                            ttl=client.config.task_ttl)
    # in Cluster mode a unique claim lives in its queue's slot, which the move's script is in
    return Lifecycle([TaskFeature(recorder), UniqueFeature(client.keys),
                      StatusFeature(client.clock, client.config.max_payload_size, client.keys),
                      WorkflowFeature(client.keys)])
