"""Workflows: steps (jobs) with dependencies, each enqueued exactly once when its last dependency
has finished; Celery's canvas (chain, group, chord) and any acyclic graph.

    from sidequest import chain, chord, group, workflow, Workflow

    workflow_id = chain(fetch.s(url), parse.s(), store.s()).perform_async()
    workflow_id = chord([price.s(sku) for sku in skus], total.s()).perform_async()
    workflow_id = (workflow("publish").add("resize", resize.s("a.png"))
                   .add("upload", upload.s(), after=["resize"]).perform_async())
    Workflow.find(workflow_id).status()          # {"state": "running", "counts": {...}, ...}

Parts, by role:

    signature  Signature: a job, its arguments and options, mutable (`.s`) or not (`.si`), and
               its failure policy (stop, continue, a compensating job)
    builder    WorkflowBuilder: named steps with `after=`, written and started in one transaction
    canvas     chain, group, chord: workflows built for you
    handle     Workflow, the handle: status, steps with their results, result(step), results, cancel;
               GroupResult and ChainResult, Celery's handles (`group(...).apply_async()`,
               `chain(...).apply_async()`)
    feature    WorkflowFeature, the lifecycle feature that records each step's fate and pushes its
               dependents in the move that files its job
    lua        the workflows' Lua: the shared library, the lifecycle operation, the cancel
"""

from sidequest.features.workflows.builder import STATUSES, TTL, WorkflowBuilder
from sidequest.features.workflows.canvas import Chain, Group, chain, chord, group, workflow
from sidequest.features.workflows.feature import WorkflowFeature
from sidequest.features.workflows.handle import ChainResult, GroupResult, Workflow
from sidequest.features.workflows.signature import Signature

__all__ = [
    "STATUSES",
    "TTL",
    "Chain",
    "ChainResult",
    "Group",
    "GroupResult",
    "Signature",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowFeature",
    "chain",
    "chord",
    "group",
    "workflow",
]
