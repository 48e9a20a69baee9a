"""The `sidequest` command. The only place that configures logging, and (through `signals`) the
only place that maps OS signals to a launcher's methods.

    root        the command group, and its two errors: UserError (exit 2), Unreachable (exit 1);
                it imports a subcommand's module when the subcommand is asked for
    logs        configure_logging: text or JSON lines, with the job's context
    worker      `worker`: settings, job modules (`require`), one process or a supervisor
    pidfile     `worker -P`: one live process per pidfile
    web         `web`: the dashboard, served by uvicorn
    demo/       `demo` (the command, in `__init__`) and `demo.run`, what `make demo` runs: a
                worker and example jobs
    admin/      the commands that read or act on a running cluster through the admin API:
        connect     what they share: --redis-url, --json, their client, one-line errors
        render, views
                    aligned tables (rich) and JSON output; the tables built from the admin API
        queues      `stats`, `queues`, `enqueue`, `tasks show`
        sets        `retries`, `scheduled`, `dead`
        processes   `processes`
        top         `top`, the live view
        health      `health`: liveness (local) and readiness (Redis) for container probes
        workflows   `workflows show`: a workflow's state and steps
        periodic    `periodic`: the periodic entries
"""

from __future__ import annotations

from sidequest.cli.logs import JobContextFilter, JsonFormatter, configure_logging
from sidequest.cli.root import Unreachable, UserError, main
from sidequest.cli.worker import BANNER, build_config, check_folder, dotted_name, require, run_supervisor, run_worker

__all__ = [
    "BANNER",
    "JobContextFilter",
    "JsonFormatter",
    "Unreachable",
    "UserError",
    "build_config",
    "check_folder",
    "configure_logging",
    "dotted_name",
    "main",
    "require",
    "run_supervisor",
    "run_worker",
]
