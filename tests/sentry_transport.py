"""A real Sentry `Transport` that keeps what the SDK sends, for the tests: in memory, or as one
JSON line per event or transaction in a file (for a worker subprocess). Nothing leaves the machine."""

from __future__ import annotations

import json
import threading
from typing import Any

from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport


class MemoryTransport(Transport):
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.lock = threading.Lock()
        self.items: list[tuple[str, dict]] = []  # ("event" or "transaction", its JSON)

    def capture_envelope(self, envelope: Envelope) -> None:
        with self.lock:
            for item in envelope.items:
                if item.type in ("event", "transaction"):
                    self.items.append((item.type, item.payload.json or {}))

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [body for found, body in self.items if found == kind]

    def flush(self, timeout: float, callback: Any = None) -> None:
        pass


class FileTransport(MemoryTransport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def capture_envelope(self, envelope: Envelope) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            for item in envelope.items:
                if item.type in ("event", "transaction"):
                    out.write(json.dumps([item.type, item.payload.json]) + "\n")
