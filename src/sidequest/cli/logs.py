"""Logging set-up, done here and nowhere else: text or JSON lines, with the job's context."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import queue
import sys
import threading
from typing import Any

from sidequest.store.redaction import redact
from sidequest.worker.processor import job_context

# the job's fields a record carries inside a job, as record attributes and in both formats
JOB_FIELDS = ("class", "jid", "queue", "trace_id")


class JobContextFilter(logging.Filter):
    """Adds `tid` and, inside a job, its fields to every record: the attributes `job_class`,
    `jid`, `queue` and `trace_id` (for handlers of your own), and `class=... jid=... queue=...
    trace_id=...` for the text format (trace_id only when the job carries a `traceparent`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.tid = format(threading.get_ident(), "x")[-6:]
        ctx = job_context.get()
        record.ctx = ctx
        if ctx:
            record.job_class, record.jid, record.queue, record.trace_id = ctx[:4]
            record.job = f" class={ctx[0]} jid={ctx[1]} queue={ctx[2]}" + (f" trace_id={ctx[3]}" if ctx[3] else "")
        else:
            record.job = ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, pid, tid, the job's class, jid, queue and trace id
    (inside a job; trace_id when it has one), message."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"ts": self.formatTime(record), "level": record.levelname.lower(),
                                 "pid": record.process, "tid": getattr(record, "tid", "")}
        ctx = getattr(record, "ctx", None)
        if ctx:
            entry.update((name, value) for name, value in zip(JOB_FIELDS, ctx[:4], strict=True) if value is not None)
        entry["msg"] = record.getMessage()
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class Redacting(logging.Formatter):
    """Another formatter's lines with the credentials of the Redis URL in use scrubbed (see
    `store.redaction`): whatever a message, an exception from redis-py or a traceback quotes,
    no password reaches the log."""

    def __init__(self, inner: logging.Formatter, url: str) -> None:
        super().__init__()
        self.inner, self.url = inner, url

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), self.url)


_listener: logging.handlers.QueueListener | None = None


def _stop_listener() -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


def configure_logging(verbose: bool, logfile: str | None, level: str = "info", fmt: str = "text",
                      url: str = "") -> None:
    """Log to stdout (or `logfile`) at `level` (`verbose` means debug), as text or JSON, with
    the credentials of the Redis `url` scrubbed from every line.

    Threads hand records to a queue (a lock-free put) and one listener thread writes them, so
    ten processors logging a line per job never contend for the stream's lock.
    """
    global _listener
    first = _listener is None
    output: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stdout)
    output.setFormatter(Redacting(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s pid=%(process)d tid=%(tid)s%(job)s %(levelname)s: %(message)s"), url))
    if _listener is not None:
        _listener.stop()
    _listener = logging.handlers.QueueListener(queue.SimpleQueue(), output)
    handler = logging.handlers.QueueHandler(_listener.queue)
    handler.addFilter(JobContextFilter())  # runs in the logging thread: it reads the job's context
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else getattr(logging, level.upper()))
    for noisy in ("redis", "urllib3", "asyncio"):  # their debug lines are not ours to show
        logging.getLogger(noisy).setLevel(max(root.level, logging.INFO))
    if first:
        atexit.register(_stop_listener)  # once per process: the listener in place at exit flushes
    _listener.start()
