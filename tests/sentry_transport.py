"""A real Sentry `Transport` that keeps what the SDK sends, for the tests: in memory, or as one
JSON line per event, transaction or span in a file (for a worker subprocess). Nothing leaves the machine.

sentry-sdk 2 sends a job's run as a transaction event holding its spans; sentry-sdk 3 streams
each span by itself (a segment span per job, attributes instead of data). `sent_transactions` puts
streamed spans back together as the transaction Sentry shows (name, op, status, trace, child
spans with their data), so a test reads one shape whatever the SDK."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

KINDS = ("event", "transaction", "span")


def _items(envelope: Envelope) -> list[tuple[str, dict]]:
    kept: list[tuple[str, dict]] = []
    for item in envelope.items:
        if item.type in ("event", "transaction"):
            kept.append((item.type, item.payload.json or {}))
        elif item.type == "span":  # sentry-sdk 3: a batch of streamed spans
            kept.extend(("span", span) for span in (item.payload.json or {}).get("items", []))
    return kept


def sent_transactions(items: Iterable[tuple[str, dict]]) -> list[dict]:
    """The transactions sent, in the order their run ended: as sent (sentry-sdk 2), or built from
    streamed spans (3): each segment span with the spans whose `sentry.segment.id` names it."""
    items = list(items)
    found = [body for kind, body in items if kind == "transaction"]
    spans = [body for kind, body in items if kind == "span"]
    for segment in (s for s in spans if s.get("is_segment")):
        children = [s for s in spans if not s.get("is_segment")
                    and _attributes(s).get("sentry.segment.id") == segment["span_id"]]
        found.append(_as_transaction(segment, children))
    return found


def _attributes(span: dict) -> dict[str, Any]:
    return {key: value.get("value") for key, value in (span.get("attributes") or {}).items()}


def _as_transaction(segment: dict, children: list[dict]) -> dict:
    attributes = _attributes(segment)
    return {"transaction": segment["name"],
            "transaction_info": {"source": attributes.get("sentry.segment.name.source")},
            "contexts": {"trace": {"trace_id": segment["trace_id"], "span_id": segment["span_id"],
                                   "parent_span_id": segment.get("parent_span_id"), "op": attributes.get("sentry.op"),
                                   "status": segment["status"]}},
            "spans": [{"op": _attributes(child).get("sentry.op"), "description": child["name"],
                       "span_id": child["span_id"], "parent_span_id": child.get("parent_span_id"),
                       "data": _attributes(child)} for child in children]}


class MemoryTransport(Transport):
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.lock = threading.Lock()
        self.items: list[tuple[str, dict]] = []  # ("event", "transaction" or "span", its JSON)

    def capture_envelope(self, envelope: Envelope) -> None:
        with self.lock:
            self.items.extend(_items(envelope))

    def of(self, kind: str) -> list[dict]:
        """The events, or the transactions (sent as such or streamed as spans), sent so far."""
        with self.lock:
            items = list(self.items)
        return sent_transactions(items) if kind == "transaction" else [body for found, body in items if found == kind]

    def flush(self, timeout: float, callback: Any = None) -> None:
        pass


class FileTransport(MemoryTransport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def capture_envelope(self, envelope: Envelope) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            for kind, body in _items(envelope):
                out.write(json.dumps([kind, body]) + "\n")
