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

from ..processor import job_context


class JobContextFilter(logging.Filter):
    """Adds `tid` and, inside a job, `class=... jid=...` to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.tid = format(threading.get_ident(), "x")[-6:]
        ctx = job_context.get()
        record.ctx = ctx
        record.job = f" class={ctx[0]} jid={ctx[1]}" if ctx else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, pid, tid, job class and jid (inside a job), message."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"ts": self.formatTime(record), "level": record.levelname.lower(),
                                 "pid": record.process, "tid": getattr(record, "tid", "")}
        ctx = getattr(record, "ctx", None)
        if ctx:
            entry["class"], entry["jid"] = ctx
        entry["msg"] = record.getMessage()
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


_listener: logging.handlers.QueueListener | None = None


def _stop_listener() -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


def configure_logging(verbose: bool, logfile: str | None, level: str = "info", fmt: str = "text") -> None:
    """Log to stdout (or `logfile`) at `level` (`verbose` means debug), as text or JSON.

    Threads hand records to a queue (a lock-free put) and one listener thread writes them, so
    ten processors logging a line per job never contend for the stream's lock.
    """
    global _listener
    first = _listener is None
    output: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stdout)
    output.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s pid=%(process)d tid=%(tid)s%(job)s %(levelname)s: %(message)s"))
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
