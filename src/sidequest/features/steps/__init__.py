"""Durable steps: a job that survives a crash between its side effects.

    @sidequest.job
    def checkout(order_id):
        charge = sidequest.step("charge", charge_card, order_id)   # once, whatever happens next
        sidequest.step("receipt", send_receipt, order_id, charge["id"])

    def charge_card(order_id):
        key = sidequest.current_step().idempotency_key             # the same on every run
        return payments.charge(order_id, idempotency_key=key)

Durable waits (`waits`: `sleep`, `wait_for` and their awaitable forms; `events`: `send_event`)
park the job between runs: docs/durable-steps.md#durable-waits.

Parts: `run` (`step`, `astep`, `current_step`: inside a job), `records` (the key, the digest, the
records read and reset: `read_steps`, `reset_steps`), `feature` (`StepsFeature`: records removed
with the job's end), `observer` (step counts for the per-job metrics), `lua`. The guarantees and
what is atomic with what: docs/durable-steps.md.
"""

from sidequest.features.steps.events import send_event
from sidequest.features.steps.records import JobSteps, StepRecord, read_steps, reset_steps
from sidequest.features.steps.run import MAX_RESULT, CurrentStep, astep, current_step, step
from sidequest.features.steps.waits import MAX_WAIT, asleep, await_for, sleep, wait_for

__all__ = ["MAX_RESULT", "MAX_WAIT", "CurrentStep", "JobSteps", "StepRecord", "asleep", "astep", "await_for",
           "current_step", "read_steps", "reset_steps", "send_event", "sleep", "step", "wait_for"]
