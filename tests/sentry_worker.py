"""Loaded by a `sidequest worker` subprocess with `-r sentry_worker`: Sentry initialised as an
application's start-up module would (default integrations on: logging, threading, atexit...),
sending through a transport that writes each event to $SENTRY_EVENTS_FILE. Defines the job the
tests push to it by name."""

from __future__ import annotations

import os

import sentry_sdk
from sentry_transport import FileTransport

import sidequest
from sidequest.contrib.sentry import SidequestIntegration

sentry_sdk.init(transport=FileTransport(os.environ["SENTRY_EVENTS_FILE"]), traces_sample_rate=1.0,
                integrations=[SidequestIntegration(ignore_retries_of=(TimeoutError,))])


@sidequest.job(name="SentryCross", retry=5)
def sentry_cross(error: str) -> None:
    raise {"timeout": TimeoutError, "value": ValueError}[error](f"{error} on purpose")
