"""The middleware chain: an ordered list of links, each wrapping the next.

A link is a class (instantiated afresh for every job, with the arguments given when it was
added, so no state leaks between jobs) or a plain callable. It is called with the chain's
arguments plus `call_next`, and returns what `call_next()` returned or something else:

    class Stamp:
        def __call__(self, job_name, payload, queue, call_next):
            payload["stamped"] = True
            return call_next()          # a client link that returns None stops the push

    config.client_middleware.add(Stamp)

Client links receive `(job_name, payload, queue, call_next)`; server links receive
`(job, payload, queue, call_next)` where `job` is the job object about to run.

`PROCESS_CLIENT` and `PROCESS_SERVER` are the process-wide chains: every `Config` made without
chains of its own runs their links outside its own. They are for integrations that a user turns
on once for the whole process (`SidequestInstrumentor().instrument()`, `sentry_sdk.init`), as
Sidekiq's `configure_client`/`configure_server` blocks reach every chain of a Ruby process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Entry:
    link: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Callable[..., Any]:
        if isinstance(self.link, type):
            return self.link(*self.args, **self.kwargs)  # type: ignore[no-any-return]
        return self.link  # type: ignore[no-any-return]


class Chain:
    """Ordered middleware. Adding a link that is already present moves it (Sidekiq's rule).

    A chain made with an `outer` chain runs that chain's links around its own; iterating, `len`
    and `in` see both, in the order they run, while add/remove/insert change only its own.
    """

    def __init__(self, outer: Chain | None = None) -> None:
        self._entries: list[_Entry] = []
        self._outer = outer

    def _all(self) -> list[_Entry]:
        """The entries `invoke` runs, outermost first."""
        if self._outer is None:
            return self._entries
        outer = self._outer._all()
        return [*outer, *self._entries] if outer else self._entries  # most processes: no outer links, no copy per job

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (e.link for e in self._all())

    def __len__(self) -> int:
        return len(self._entries) + (len(self._outer) if self._outer is not None else 0)

    def __contains__(self, link: Any) -> bool:
        return any(entry.link is link for entry in self._all())

    def _index(self, link: Any) -> int | None:
        for i, entry in enumerate(self._entries):
            if entry.link is link:
                return i
        return None

    def _pop(self, link: Any) -> None:
        i = self._index(link)
        if i is not None:
            del self._entries[i]

    def add(self, link: Any, *args: Any, **kwargs: Any) -> None:
        """Append `link` (the innermost position, nearest the job)."""
        self._pop(link)
        self._entries.append(_Entry(link, args, kwargs))

    def prepend(self, link: Any, *args: Any, **kwargs: Any) -> None:
        """Put `link` first (the outermost position)."""
        self._pop(link)
        self._entries.insert(0, _Entry(link, args, kwargs))

    def insert_before(self, existing: Any, link: Any, *args: Any, **kwargs: Any) -> None:
        self._pop(link)
        i = self._require(existing)
        self._entries.insert(i, _Entry(link, args, kwargs))

    def insert_after(self, existing: Any, link: Any, *args: Any, **kwargs: Any) -> None:
        self._pop(link)
        i = self._require(existing)
        self._entries.insert(i + 1, _Entry(link, args, kwargs))

    def remove(self, link: Any) -> None:
        self._pop(link)

    def clear(self) -> None:
        self._entries.clear()

    def _require(self, link: Any) -> int:
        i = self._index(link)
        if i is None:
            raise ValueError(f"{link!r} is not in this middleware chain")
        return i

    def invoke(self, *args: Any, final: Callable[[], Any]) -> Any:
        """Run every link around `final`, outermost first, and return what the outermost returned."""
        entries = self._all()
        if not entries:
            return final()
        links = [entry.build() for entry in entries]

        def step(i: int) -> Any:
            if i == len(links):
                return final()
            return links[i](*args, lambda: step(i + 1))

        return step(0)


# The process-wide chains (see the module docstring); `config.Config` builds its chains on them.
PROCESS_CLIENT = Chain()
PROCESS_SERVER = Chain()
