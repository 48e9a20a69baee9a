"""A job's durable steps (`sidequest.step`), for the CLI, the dashboard and scripts.

    job_steps(jid)                  # JobSteps (class, queue, steps: name state attempts duration
                                    # result error) or None: no step recorded, or the job ended
    reset_steps(jid, "charge")      # forget one step (every step without a name): the job's next
                                    # run runs its body again; the number forgotten
"""

from __future__ import annotations

from sidequest.client.sync_client import Client, default_client
from sidequest.features.steps import records
from sidequest.features.steps.records import JobSteps


def job_steps(jid: str, client: Client | None = None) -> JobSteps | None:
    return records.read_steps((client or default_client()).redis, jid)


def reset_steps(jid: str, name: str | None = None, client: Client | None = None) -> int:
    return records.reset_steps((client or default_client()).redis, jid, name)
