"""The registry of job names a worker may run.

A worker resolves a payload's `class` here and nowhere else: a name that was not registered
(by `@sidequest.job` or by subclassing `sidequest.Job` in a module the worker imported) is never
run, whatever the payload says. Nothing is ever imported because a payload named it.
"""

from __future__ import annotations

import threading
from typing import Any

from sidequest.errors import JobDefinitionError, UnknownJobError

# A job class: a `sidequest.Job` subclass (job imports this module, so it is not named here).
JobClass = type[Any]
SHOWN = 20  # registered names an unknown-job message lists


class Registry:
    """Maps wire names (`class` in the payload) to Job classes."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobClass] = {}
        self._lock = threading.Lock()

    def register(self, job_class: JobClass) -> None:
        name = job_class.name
        with self._lock:
            existing = self._jobs.get(name)
            if existing is not None and existing is not job_class:
                same_place = (existing.__module__, existing.__qualname__) == (
                    job_class.__module__, job_class.__qualname__)
                if not same_place:  # re-importing the same module (tests, reloads) is fine
                    raise JobDefinitionError(
                        f"job name {name!r} is already registered by {existing.__module__}."
                        f"{existing.__qualname__}; give one of them another `name=`"
                    )
            self._jobs[name] = job_class

    def unregister(self, name: str) -> None:
        with self._lock:
            self._jobs.pop(name, None)

    def get(self, name: str) -> JobClass:
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJobError(self._unknown(name)) from None

    def _unknown(self, name: str) -> str:
        """One line: the name, the nearest registered ones, and every name this worker runs."""
        known = sorted(self._jobs)
        import difflib  # only for a name no one registered

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        # a job pushed from a script that defined it (`__main__.x`) or by a short module name
        close += [k for k in known if k.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1] and k not in close]
        hint = f"; did you mean {', '.join(repr(c) for c in close[:3])}?" if close else ""
        listed = ", ".join(known[:SHOWN]) + (f" and {len(known) - SHOWN} more" if len(known) > SHOWN else "")
        return (f"no job named {name!r} is registered in this worker{hint} (it runs {len(known)}: "
                f"{listed or 'none'}; start it with -r for the module that defines the job, or, if it "
                "is another project's job on a shared Redis, give each project queues of its own)")

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def names(self) -> list[str]:
        return sorted(self._jobs)

    def classes(self) -> list[JobClass]:
        with self._lock:
            return list(self._jobs.values())


default_registry = Registry()
