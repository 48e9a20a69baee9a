"""A workflow's handle: read its state and its steps, wait for its results, cancel it; and
Celery's `GroupResult` on it.

    flow = Workflow.find(workflow_id)            # None if unknown (or expired)
    flow.status()      # {"state": "running", "counts": {"done": 2, ...}, "done": False, ...}
    flow.steps()       # [{"name": "resize", "status": "done", "result": ..., "after": [], ...}, ...]
    flow.result("upload", timeout=30)            # that step's return value (`sidequest.result`)
    flow.results(timeout=30)   # its final steps' return values, in order: a group's, [a chord's callback's]
    flow.cancel()      # no further step starts; running steps see `sidequest.cancelled()`
    GroupResult(workflow_id).get(timeout=30)     # flow.results(), as Celery's GroupResult.get()

States: running, succeeded (every step done), failed (a step failed: with policy "stop" or a
compensating job at once, with "continue" once every step has ended), cancelled.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

import redis

from sidequest.client.sync_client import Client, default_client
from sidequest.errors import Cancelled, JobFailed
from sidequest.features.lookup import result
from sidequest.features.recent import newest
from sidequest.features.workflows.builder import STATUSES
from sidequest.features.workflows.lua import WORKFLOW_CANCEL, cluster_lua
from sidequest.store import keys


class Workflow:
    def __init__(self, workflow_id: str, client: Client | None = None) -> None:
        self.id = workflow_id
        self.client = client or default_client()

    @property
    def redis(self) -> redis.Redis:
        return self.client.redis

    @classmethod
    def find(cls, workflow_id: str, client: Client | None = None) -> Workflow | None:
        """The workflow with this id, or None if there is none (or it expired)."""
        flow = cls(workflow_id, client)
        return flow if flow.redis.exists(keys.workflow(workflow_id)) else None

    @classmethod
    def recent(cls, offset: int = 0, limit: int = 25,
               client: Client | None = None) -> tuple[int, list[dict[str, Any]]]:
        """The workflows created last, newest first, as `status()` gives them: (how many the index
        holds, `limit` of them from `offset`); an expired one is `{"id": ..., "expired": True}`."""
        return newest((client or default_client()).redis, keys.WORKFLOWS_RECENT, keys.workflow, _status,
                      offset, limit)

    def status(self) -> dict[str, Any]:
        stored = cast("dict[bytes, bytes]", self.redis.hgetall(keys.workflow(self.id)))
        if not stored:
            raise LookupError(f"workflow {self.id} does not exist (or has expired)")
        return _status(self.id, stored)

    def steps(self) -> list[dict[str, Any]]:
        """Every step in the order it was added: name, job, jid, status, after, policy, params
        (its own arguments), kwargs, passed (what of its dependencies' results comes before them:
        "none", "one", "list"), and from its job's status record its result (or error)."""
        _, graph_key, state_key, _ = keys.workflow_keys(self.id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(graph_key)
        pipe.hgetall(state_key)
        graph, states = pipe.execute()
        described = sorted(((k.decode(), json.loads(v)) for k, v in graph.items()), key=lambda s: s[1]["order"])
        pipe = self.redis.pipeline(transaction=False)
        for _, step in described:
            pipe.hmget(self.client.keys.status(step["jid"], step["queue"]), "result", "error_class", "error_message")
        records = pipe.execute() if described else []
        steps = []
        for (name, step), (value, error_class, error_message) in zip(described, records, strict=True):
            steps.append({
                "name": name, "job": step["job"], "jid": step["jid"],
                "status": states.get(name.encode(), b"unknown").decode(), "after": step["after"],
                "policy": step["policy"], "compensation": step.get("comp_job"), "params": step["params"],
                "kwargs": step.get("kwargs") or {}, "passed": step.get("collect", "none"),
                "result": json.loads(value) if value is not None else None,
                "error": ": ".join(v.decode("utf-8", "replace") for v in (error_class, error_message) if v) or None,
            })
        return steps

    def describe(self) -> dict[str, Any]:
        """`status()` with `steps()`: what the admin API, the CLI and the dashboard show."""
        return {**self.status(), "steps": self.steps()}

    def result(self, step: str, timeout: float | None = 10.0) -> Any:
        """Wait up to `timeout` s for `step` to end; its return value (as `sidequest.result`)."""
        raw = self.redis.hget(keys.workflow_keys(self.id)[1], step)
        if raw is None:
            raise LookupError(f"workflow {self.id} has no step {step!r} (or has expired)")
        return self._wait(step, json.loads(cast("bytes", raw)), timeout)

    def results(self, timeout: float | None = 10.0) -> list[Any]:
        """Wait up to `timeout` s in all (None: no limit) for the final steps, those no step comes
        after, to end; their return values in the order they were added: every step of a group,
        the callback of a chord (a one-item list), the last step of a chain. Each is waited for as
        `result` waits (blocked on its record's notify list) and raises as it does (JobFailed for
        a failed step, and for a step skipped because another failed, naming that one; Cancelled
        for a cancelled workflow's); TimeoutError names the step not ended."""
        graph = cast("dict[bytes, bytes]", self.redis.hgetall(keys.workflow_keys(self.id)[1]))
        if not graph:
            raise LookupError(f"workflow {self.id} does not exist (or has expired)")
        described = sorted(((k.decode(), json.loads(v)) for k, v in graph.items()), key=lambda s: s[1]["order"])
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for name, step in described:
            if step["dependents"]:
                continue
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                values.append(self._wait(name, step, left))
            except TimeoutError:
                raise TimeoutError(f"workflow {self.id}: step {name!r} ({step['job']}) has not ended after "
                                   f"{timeout:g} s") from None
        return values

    def _wait(self, name: str, step: dict[str, Any], timeout: float | None) -> Any:
        """One step's return value, as `sidequest.result` waits for it. A step the workflow
        skipped (its job's record only says "cancelled") raises what stopped it: JobFailed naming
        the step that failed (as Celery's chord raises its header's failure), else Cancelled."""
        try:
            return result(step["jid"], timeout, client=self.client)
        except Cancelled as exc:
            raise self._never_ran(name, step) or exc from None

    def _never_ran(self, name: str, step: dict[str, Any]) -> JobFailed | Cancelled | None:
        steps = {each["name"]: each for each in self.steps()}
        if steps.get(name, {}).get("status") != "skipped":
            return None  # its own job was cancelled: the record says so
        status = self.status()
        failed = status["failed_step"]
        prefix = f"workflow {self.id}: step {name!r} ({step['job']}) never ran: "
        if failed in steps:
            return JobFailed(f"{prefix}step {failed!r} failed ({steps[failed]['error']})")
        return Cancelled(f"{prefix}the workflow was {'cancelled' if status['state'] == 'cancelled' else 'stopped'}")

    def cancel(self) -> bool:
        """Cancel the workflow: no further step starts, waiting steps are skipped, enqueued ones
        are removed and running ones are flagged (`sidequest.cancelled()`). False if it had
        already ended or been cancelled; LookupError if there is no such workflow. A workflow
        that a failure stopped stays failed, and its steps still running are cancelled."""
        from sidequest.features.cancellation import (
            Canceller,  # it imports the operators' lifecycle, which holds this feature
        )

        script = self.redis.register_script(cluster_lua(WORKFLOW_CANCEL) if self.client.keys.cluster
                                            else WORKFLOW_CANCEL)
        jids = script(keys=keys.workflow_keys(self.id), args=[self.client.clock()])
        if jids == -1:
            raise LookupError(f"workflow {self.id} does not exist (or has expired)")
        if not isinstance(jids, list):
            return False
        canceller = Canceller(self.client)
        for jid in jids:
            canceller.cancel(jid.decode())
        return True


def _status(workflow_id: str, stored: dict[bytes, bytes]) -> dict[str, Any]:
    raw = {k.decode(): v.decode() for k, v in stored.items()}
    counts = {s: int(raw.get(f"count:{s}", 0)) for s in STATUSES}
    return {
        "id": workflow_id, "name": raw.get("name", ""), "state": raw.get("state", "unknown"),
        "done": "finished_at" in raw, "total": int(raw.get("total", 0)), "counts": counts,
        "failed_step": raw.get("failed_step"), "compensation": raw.get("compensation"),
        "created_at": float(raw["created_at"]) if "created_at" in raw else None,
        "finished_at": float(raw["finished_at"]) if "finished_at" in raw else None,
    }


class GroupResult:
    """Celery's GroupResult on a workflow: what `group(...).apply_async()` returns, and what
    `GroupResult(workflow_id)` finds again (Celery's `GroupResult.restore`).

        handle = sidequest.group([price.s(sku) for sku in skus]).apply_async()
        handle.id                   # the workflow's id: Workflow.find(handle.id)
        handle.get(timeout=10)      # [p1, p2, ...] in order, once all have ended (`Workflow.results`)
        handle.ready()              # True once no step waits, is enqueued or runs
    """

    def __init__(self, workflow_id: str, client: Client | None = None) -> None:
        self.id = workflow_id
        self.workflow = Workflow(workflow_id, client)

    def get(self, timeout: float | None = 10.0) -> list[Any]:
        """The steps' results in order, waiting up to `timeout` s (None: no limit); raises as
        `Workflow.results` does (the first failed step's JobFailed, as Celery's `propagate=True`)."""
        return self.workflow.results(timeout)

    def ready(self) -> bool:
        return bool(self.workflow.status()["done"])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


class ChainResult:
    """Celery's AsyncResult of a chain or a chord: what their `apply_async()` returns. `get`
    gives the last step's return value (a chord's callback's), as Celery's does; a chain that
    ends in a group gives that group's list, as Celery's GroupResult would.

        handle = sidequest.chain(sub.s(10, 1), sub.s(100)).apply_async()
        handle.get(timeout=10)      # -91
    """

    def __init__(self, workflow_id: str, client: Client | None = None) -> None:
        self.id = workflow_id
        self.group = GroupResult(workflow_id, client)
        self.workflow = self.group.workflow

    def get(self, timeout: float | None = 10.0) -> Any:
        """The final step's return value, waiting up to `timeout` s (None: no limit); the list of
        them when the chain ends in several steps at once (a group). Raises as `Workflow.results`."""
        values = self.group.get(timeout)
        return values[0] if len(values) == 1 else values

    def ready(self) -> bool:
        return self.group.ready()

    def __repr__(self) -> str:
        return f"<ChainResult {self.id}>"
