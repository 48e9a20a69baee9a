"""Building a workflow: steps with dependencies, written and started in one transaction.

    flow = (sidequest.workflow("publish a.png")
            .add("resize", resize.s("a.png"))
            .add("thumb", thumbnail.s("a.png"))
            .add("upload", upload.s("s3"), after=["resize", "thumb"]))   # upload([resize's, thumb's], "s3")
    workflow_id = flow.perform_async()

Steps are added after their dependencies (so the graph has no cycle by construction). At
`perform_async` every step's payload is built (its arguments checked, client middleware run)
and the workflow's records are written in the same MULTI that pushes the steps with no
dependency (with `wait_replicas`, the most any step asks, confirmed for that MULTI); every
later step is pushed by the lifecycle operation (see `feature`) when its last dependency is
resolved. Each step's job keeps its result for the workflow's `ttl` (`result_ttl`,
unless its options ask for one of their own), and its dependents read it from there.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sidequest.client.sync_client import Client, Replicas, default_client
from sidequest.errors import JobArgumentError
from sidequest.features.recent import remember
from sidequest.features.workflows.signature import Signature
from sidequest.jobs.options import check_options
from sidequest.jobs.payload import check_kwargs, encode
from sidequest.store import keys

TTL = 7 * 24 * 3600  # seconds a workflow's records (and its steps' results) are kept after its last change
RECENT_LIMIT = 10_000  # the recent workflows index keeps at most this many
STATUSES = ("waiting", "enqueued", "running", "done", "failed", "cancelled", "skipped")

Collect = Literal["none", "one", "list"]


@dataclass(frozen=True)
class _Step:
    signature: Signature
    after: tuple[str, ...]
    collect: Collect  # what it gets of its dependencies' results: nothing, the one, or the list


class WorkflowBuilder:
    """A graph of steps (see the module docstring); `perform_async` starts it and returns its id."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.steps: dict[str, _Step] = {}

    def add(self, step: str, signature: Signature, *, after: Sequence[str] = ()) -> WorkflowBuilder:
        """Add a step that runs once every step named in `after` has finished. A mutable
        signature (`.s`) gets the result of its one dependency as its first argument (Celery's
        order), or the list of its dependencies' results (in `after` order); an immutable one
        (`.si`) gets nothing."""
        collect: Collect = "none" if signature.immutable or not after else "one" if len(after) == 1 else "list"
        return self.add_step(step, signature, tuple(after), collect)

    def add_step(self, step: str, signature: Signature, after: tuple[str, ...], collect: Collect) -> WorkflowBuilder:
        if not isinstance(step, str) or not step:
            raise ValueError(f"a step's name is a non-empty string, got {step!r}")
        if step in self.steps:
            raise ValueError(f"step {step!r} is already in the workflow")
        if not isinstance(signature, Signature):
            raise TypeError(f"step {step!r}: give a signature (job.s(...) or job.si(...)), got {signature!r}")
        unknown = [name for name in after if name not in self.steps]
        if unknown:
            raise ValueError(f"step {step!r} comes after {unknown}, which are not in the workflow yet "
                             "(add a step after its dependencies)")
        if len(set(after)) != len(after):
            raise ValueError(f"step {step!r} names a dependency twice: {list(after)}")
        self.steps[step] = _Step(signature, after, "none" if not after else collect)
        return self

    def perform_async(self, *, client: Client | None = None, ttl: float = TTL) -> str:
        """Write the workflow and push its first steps; return its id (`Workflow.find(id)`)."""
        if not self.steps:
            raise ValueError("a workflow needs at least one step")
        chosen = client or default_client()
        space = chosen.keys
        workflow_id = secrets.token_hex(12)
        if space.cluster:  # its id carries the hash tag of its first step's queue (see `lua`)
            first = next(iter(self.steps.values())).signature
            workflow_id = "{" + keys.group_of(_declared_queue(first)) + "}" + workflow_id
        now = chosen.clock()
        keep = max(1, int(ttl))
        dependents: dict[str, list[str]] = {name: [] for name in self.steps}
        for name, step in self.steps.items():
            for dep in step.after:
                dependents[dep].append(name)
        roots: list[tuple[dict[str, Any], float | None]] = []
        waiting: list[tuple[str, str]] = []
        graph: dict[str, str] = {}
        for order, (name, step) in enumerate(self.steps.items()):
            payload = _payload(chosen, step.signature, workflow_id, name, now, keep, step.collect != "none")
            described: dict[str, Any] = {
                "order": order, "jid": payload["jid"], "job": step.signature.label, "after": list(step.after),
                "dependents": dependents[name], "collect": step.collect, "queue": payload["queue"],
                "policy": "compensate" if isinstance(step.signature.policy, Signature) else step.signature.policy,
                "params": payload["args"], **({"kwargs": payload["kwargs"]} if "kwargs" in payload else {})}
            if isinstance(step.signature.policy, Signature):
                undo = _payload(chosen, step.signature.policy, None, None, now, keep, False)
                described |= {"comp": encode(undo)[:-1], "comp_queue": undo["queue"], "comp_jid": undo["jid"],
                              "comp_job": step.signature.policy.label}
            if step.after:
                blob = encode({key: value for key, value in payload.items() if key != "args"})
                described |= {"args": encode({"a": payload["args"]})[5:-1], "rest": blob[1:-1]}
                waiting.append((payload["jid"], payload["queue"]))
            else:
                roots.append((payload, None))
            graph[name] = json.dumps(described)
        if space.cluster:  # one slot: every step's queue carries the id's hash tag
            described_all = [json.loads(d) for d in graph.values()]
            queues = sorted({q for d in described_all for q in (d["queue"], d.get("comp_queue")) if q})
            group = workflow_id[1:workflow_id.index("}")]
            strays = [q for q in queues if keys.group_of(q) != group]
            if strays:
                raise JobArgumentError(
                    f"in Cluster mode a workflow lives in one slot: its steps' queues must be one queue or the queues "
                    f"of one group ({{{group}}}name), but {', '.join(map(repr, strays))} are not in {group!r}'s")
            chosen.redis.sadd(keys.QUEUES, *queues)  # a released step's queue is listed already

        def record(pipe: Any) -> None:
            hash_key, graph_key, state_key, pending_key = keys.workflow_keys(workflow_id)
            counts = {f"count:{s}": 0 for s in STATUSES}
            counts["count:enqueued"] = len(roots)
            counts["count:waiting"] = len(self.steps) - len(roots)
            pipe.hset(hash_key, mapping={"name": self.name, "state": "running", "created_at": now,
                                         "total": len(self.steps), "ttl": keep, **counts})
            pipe.hset(graph_key, mapping=graph)
            pipe.hset(state_key, mapping={n: "waiting" if s.after else "enqueued"
                                          for n, s in self.steps.items()})
            pipe.hset(pending_key, mapping={n: len(s.after) for n, s in self.steps.items()})
            for key in keys.workflow_keys(workflow_id):
                pipe.expire(key, keep)
            for jid, queue in waiting:  # not pushed yet: `sidequest.status` and `result` see them as scheduled
                pipe.hset(space.status(jid, queue), mapping={"state": "scheduled", "updated_at": now})
                pipe.expire(space.status(jid, queue), keep)
            if not space.cluster:  # in Cluster mode the index is in another slot: written after
                remember(pipe, keys.WORKFLOWS_RECENT, workflow_id, now, keep, RECENT_LIMIT)

        chosen.write(roots, now, also=record, replicas=_replicas(chosen, self.steps.values()))
        if space.cluster:
            index = chosen.redis.pipeline(transaction=False)
            remember(index, keys.WORKFLOWS_RECENT, workflow_id, now, keep, RECENT_LIMIT)
            index.execute()
        return workflow_id


def _replicas(client: Client, steps: Iterable[_Step]) -> Replicas:
    """What the start of a workflow waits for (`wait_replicas`): the most any of its steps asks
    (its options, its job's, the client's), since the write holds every step's record."""
    return max((client.replicas(step.signature.job, step.signature.options) for step in steps),
               key=lambda asked: (asked.count, asked.timeout))


def _declared_queue(signature: Signature) -> str:
    """The queue a step's job goes to, before client middleware: its push option, else its job's."""
    declared = getattr(signature.job, "payload_options", None)
    defaults = declared() if callable(declared) and not isinstance(signature.job, str) else {}
    return str(signature.options.get("queue") or defaults.get("queue") or "default")


def _payload(client: Client, signature: Signature, workflow_id: str | None, step: str | None, now: float,
             keep: int, passed: bool) -> dict[str, Any]:
    """The checked payload of a step's job (`passed`: with the place of its dependencies' results,
    the first argument, filled for the check, then left out), or of a compensating job (no
    workflow fields). A step's keyword arguments are the payload's "kwargs"."""
    options = check_options(dict(signature.options))
    steer = None
    if workflow_id is not None and step is not None:
        steer = {"workflow_id": workflow_id, "workflow_step": step}
        options.setdefault("result_ttl", keep)
    args = [None, *signature.args] if passed else list(signature.args)
    if signature.kwargs:  # their own fault, not the result's place: said without the step's note below
        try:
            check_kwargs(signature.kwargs)
        except JobArgumentError as exc:
            raise JobArgumentError(f"job {signature.label}: {exc}") from None
    try:
        entries, _ = client.build(signature.job, [args], [None], now, options, steer, kwargs=signature.kwargs or None)
    except JobArgumentError as exc:
        if not passed:
            raise
        raise JobArgumentError(f"step {step}: {exc} (the first argument, None here, is the place of its "
                               "dependencies' results, which a mutable step gets first, as in Celery; "
                               ".si(...) runs a step with exactly its arguments)") from None
    if not entries:
        raise JobArgumentError(f"client middleware stopped the job {signature.label} of a workflow; a workflow's "
                               "steps cannot be left out")
    payload = entries[0][0]
    if "flow_key" in payload:  # its dependents are pushed by the workflow's Lua, not the push script
        raise JobArgumentError(f"job {signature.label}: debounce and throttle are not available for a workflow's "
                               "steps; push it with debounce=None, throttle=None")
    if passed:
        payload["args"] = payload["args"][1:]
    return payload
