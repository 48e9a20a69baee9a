"""The workflow feature of the job lifecycle: each step's status kept current, and its dependents
pushed, in the atomic call that moves the step's job (see `lifecycle` and `lua`).

A step's job carries `workflow_id` and `workflow_step` in its payload (fields only the builder
sets, see `options.FEATURE_FIELDS`); the event applies only if its jid is the one the workflow
recorded for the step, and a step's first end is its only one (see `lua.wf_event`). At each
point of its life the feature sends one event for it:

    taken                                       running
    finished                                    done: its dependents may be released
    retried, put_back, snoozed, requeued        enqueued (waiting for another attempt)
    recovered                                   enqueued, or failed if recovery killed it
    dead, dropped, killed, deleted              failed: its failure policy applies
    cancelled                                   cancelled: its failure policy applies

It must come after the status feature in a lifecycle: a step's result, which its dependents
receive, is the one the status feature writes in the same call.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sidequest.features.workflows.lua import WORKFLOW_FEATURE, cluster_lua
from sidequest.store import keys
from sidequest.worker.outcome import Outcome

EVENT_AT = {"taken": "running", "finished": "done", "retried": "enqueued", "put_back": "enqueued",
            "snoozed": "enqueued", "requeued": "enqueued", "dead": "failed", "dropped": "failed",
            "killed": "failed", "deleted": "failed", "cancelled": "cancelled"}


class WorkflowFeature:
    """Records a step's fate and releases its dependents with the move of its job."""

    name = "workflow"
    marks: frozenset[str] | None = frozenset({"workflow_id"})  # ops only for payloads with these keys
    observes, wraps = False, False  # whether `observe` and `running` ever do anything
    lua = WORKFLOW_FEATURE

    def __init__(self, space: keys.Keyspace = keys.DEFAULT) -> None:
        if space.cluster:  # a workflow's steps and records carry their queues' hash tag (see `lua`)
            self.lua = cluster_lua(WORKFLOW_FEATURE)

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        workflow_id, step, jid = payload.get("workflow_id"), payload.get("workflow_step"), payload.get("jid")
        if not isinstance(workflow_id, str) or not isinstance(step, str) or not isinstance(jid, str):
            return None
        event = EVENT_AT.get(point)
        if point == "recovered":
            event = "failed" if outcome is not None and outcome.kind == "dead" else "enqueued"
        if event is None:
            return None
        return [*keys.workflow_keys(workflow_id), step, event, jid]  # the script checks it is the step's

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        return None

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Everything is written by `ops`, with the job's move."""
