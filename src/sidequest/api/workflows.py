"""Workflows in the admin API: the recent ones, one with its graph, and cancel.

    from sidequest.api.workflows import recent_workflows, workflow_detail

    total, newest = recent_workflows(limit=10)
    detail = workflow_detail(workflow_id)   # status() and steps(), or None if unknown
    cancel_workflow(workflow_id)            # True, False if it had ended, None if unknown

The dashboard and the CLI read workflows through these; `sidequest.Workflow` is the same data
for code that starts them.
"""

from __future__ import annotations

from typing import Any

from sidequest.client.sync_client import Client, default_client
from sidequest.features.workflows import Workflow


def recent_workflows(offset: int = 0, limit: int = 25,
                     client: Client | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(how many the recent index holds, `limit` workflows from `offset`, newest first)."""
    return Workflow.recent(offset, limit, client=client or default_client())


def workflow_detail(workflow_id: str, client: Client | None = None) -> dict[str, Any] | None:
    """The workflow's status with its steps (the graph: each step's `after`), or None."""
    flow = Workflow.find(workflow_id, client or default_client())
    if flow is None:
        return None
    try:
        return flow.describe()
    except LookupError:  # it expired between the two reads
        return None


def cancel_workflow(workflow_id: str, client: Client | None = None) -> bool | None:
    """Cancel it (see `Workflow.cancel`): True, False if it had already ended, None if unknown."""
    flow = Workflow.find(workflow_id, client or default_client())
    if flow is None:
        return None
    try:
        return flow.cancel()
    except LookupError:
        return None
