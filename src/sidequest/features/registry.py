"""The one list of features plugged into a job's life, registered into the worker's lifecycle seam,
and the one list of their parts of a push and of a client's reads, registered into the client's.

`import sidequest` imports this module, which fills `worker.lifecycle`'s list; a worker
(`Launcher`, a supervisor's orphan recovery) and an operator's move (`api.actions`, a cancel) build
their features from it (`lifecycle.compose`), so neither names a feature. It fills
`client.plugins` too: the push asks it for a job's claim (unique, debounce and throttle), its
status record (results) and a push's checks (debounce and throttle), and the asyncio client for
the queries by jid (status and result: `lookup`; an event: `steps.events`), so no client module
names a feature either. Claims are asked in this order, first match deciding: a debounced or
throttled job's record is its claim (`flow.check` refuses unique_for beside them).

The order is the order of the operations inside SETTLE, RESERVE, RECOVER and the ADMIN_* scripts:
the workflow's operation reads the result the status operation wrote in the same call, so it
comes after it. `tests/store/test_scripts_text.py` prints each script as it runs with this list.
"""

from __future__ import annotations

from typing import Any

from sidequest.client.plugins import ClientPlugin
from sidequest.client.plugins import register as register_client_part
from sidequest.client.sync_client import Client
from sidequest.features import flow, lookup, results, unique
from sidequest.features.cancellation import CancelFeature
from sidequest.features.flow import FlowFeature
from sidequest.features.job_metrics import JobMetricsFeature
from sidequest.features.lanes import LanesFeature
from sidequest.features.periodic import PeriodicRegistry, PeriodicScheduler, default_periodic, entries_from_config
from sidequest.features.results import StatusFeature
from sidequest.features.steps.events import event_query
from sidequest.features.steps.feature import StepsFeature
from sidequest.features.tasks import TaskFeature, TaskRecorder
from sidequest.features.unique import UniqueFeature
from sidequest.features.workflows import WorkflowFeature
from sidequest.worker.background.heartbeat import Flush
from sidequest.worker.lifecycle import Plugin, Setting, register


def _task(s: Setting) -> TaskFeature:
    return TaskFeature(TaskRecorder(s.redis, s.config.task_retention, clock=s.clock, ttl=s.config.task_ttl))


def _metrics_flush(feature: Any) -> Flush:
    flush: Flush = feature.flush  # written with each heartbeat, in its MULTI
    return flush


def _steps_flush(feature: Any) -> Flush:
    flush: Flush = feature.flush  # the step counts per job class, in the heartbeat's MULTI
    return flush


def _periodic(s: Setting) -> PeriodicScheduler:
    """The periodic scheduler: the config file's `:periodic:` entries, and those registered in code
    (`Launcher(config, periodic=registry)` in place of `default_periodic`), read on every pass."""
    from_file = entries_from_config(s.config.periodic, s.registry)
    given: PeriodicRegistry | None = s.options.get("periodic")
    in_code = default_periodic if given is None else given
    return PeriodicScheduler(
        Client(s.config, redis_client=s.redis), clock=s.clock, ttl=s.config.periodic_ttl,
        entries=lambda: list({e.id: e for e in [*from_file, *in_code.entries()]}.values()))


PLUGINS = (
    Plugin("task", feature=_task, operator=True),
    Plugin("job_metrics", feature=lambda s: JobMetricsFeature(clock=s.clock), flush=_metrics_flush),
    Plugin("cancel", feature=lambda s: CancelFeature(s.redis)),  # the running job's flag (a waiting job: ADMIN_DELETE)
    Plugin("unique", feature=lambda s: UniqueFeature(s.keys), operator=True),
    Plugin("lanes", feature=lambda s: LanesFeature(s.keys), operator=True),  # a laned job's end stages more
    Plugin("flow", feature=lambda s: FlowFeature(s.keys), operator=True),  # a debounced run ends its record
    Plugin("status", feature=lambda s: StatusFeature(s.clock, s.config.max_payload_size, s.keys), operator=True),
    Plugin("steps", feature=lambda s: StepsFeature(s.keys, s.clock), operator=True,  # records leave with the job
           flush=_steps_flush),
    Plugin("workflow", feature=lambda s: WorkflowFeature(s.keys), operator=True),  # after status: reads the results
    Plugin("periodic", service=_periodic),
)

register(*PLUGINS)

CLIENT_PLUGINS = (
    ClientPlugin("flow", options=("debounce", "throttle", "key"), shape=flow.shape, field="flow_key", claim=flow.claim),
    ClientPlugin("unique", field="unique_for", claim=unique.claim),
    ClientPlugin("status", field="result_ttl", record=results.at_push, status=lookup.state_query,
                 result=lambda jid, timeout, space: lookup.result_query(jid, timeout, space=space)),
    ClientPlugin("steps", send_event=event_query),
)

register_client_part(*CLIENT_PLUGINS)
