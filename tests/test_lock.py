"""The committed locks (issue 37): `make demo` and `make test` install locks/demo.txt and locks/test.txt,
`make docs` locks/docs.txt (issue 42), all written by `make lock` (uv, one universal lock for Python
3.11-3.13). These tests pin what makes a lock worth having: every package in it is pinned to one
version with its hashes, the versions satisfy pyproject.toml's bounds on every Python pyproject
promises, the locks agree, and nothing this suite's virtualenv installed at a locked version pulled
in a package the lock lacks.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from dataclasses import dataclass

import pytest
from conftest import ROOT
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCKS = {name: ROOT / "locks" / f"{name}.txt" for name in ("demo", "docs", "test")}
PYTHONS = ["3.11", "3.12", "3.13"]  # pyproject's classifiers; .ci/run tests each
# not in the suite's lock: `make bench` installs its own tools on top, `make docs` locks/docs.txt
UNLOCKED_EXTRAS = {"bench", "docs"}


@dataclass(frozen=True)
class Pin:
    name: str
    version: Version
    marker: Marker | None
    hashes: int


def _pins(text: str) -> list[Pin]:
    """Every requirement of a pip requirements file with its continuation lines joined."""
    pins = []
    for entry in re.sub(r"\\\n\s*", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        hashes = len(re.findall(r"--hash=sha256:[0-9a-f]{64}", entry))
        requirement = Requirement(re.sub(r"\s--\S+", "", entry))  # pip options: --hash and any other
        specs = list(requirement.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not pinned to one version: {entry[:100]}"
        pins.append(Pin(canonicalize_name(requirement.name), Version(specs[0].version), requirement.marker, hashes))
    return pins


def _environment(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
            "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def _applies(marker: Marker | None, env: dict[str, str], extra: str = "") -> bool:
    return marker is None or marker.evaluate({**env, "extra": extra})


def _locked_for(lock: str, python: str) -> dict[str, Version]:
    env = _environment(python)
    chosen: dict[str, Version] = {}
    for pin in _pins(LOCKS[lock].read_text(encoding="utf-8")):
        if _applies(pin.marker, env):
            assert pin.name not in chosen, f"{lock} lock: two pins of {pin.name} for Python {python}"
            chosen[pin.name] = pin.version
    return chosen


def _declared(lock: str) -> list[Requirement]:
    """What pyproject asks of the lock: the runtime dependencies, for the suite every extra it installs,
    for the docs site the `docs` extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(req) for req in project["dependencies"]]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    chosen = {"demo": [], "docs": ["docs"], "test": [extra for extra in extras if extra not in UNLOCKED_EXTRAS]}[lock]
    for extra in chosen:
        wanted += [Requirement(req) for req in extras[extra] if canonicalize_name(Requirement(req).name) != "sidequest"]
    return wanted


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_package_in_the_lock_is_pinned_with_its_hashes(lock: str) -> None:
    pins = _pins(LOCKS[lock].read_text(encoding="utf-8"))
    assert len(pins) > 10
    assert [pin.name for pin in pins if pin.hashes == 0] == []


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_satisfies_pyproject_on_every_python(lock: str, python: str) -> None:
    locked = _locked_for(lock, python)
    env = _environment(python)
    unmet = []
    for requirement in _declared(lock):
        if not _applies(requirement.marker, env):
            continue
        version = locked.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement} (locked: {version})")
    assert unmet == [], f"{lock} lock on Python {python}: run `make lock`"


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("lock", ["demo", "docs"])
def test_the_other_locks_take_the_suites_versions(lock: str, python: str) -> None:
    """The demo's packages are the suite's; so are the docs site's wherever the two share one, which
    `make docs` installs into the suite's .venv (`make lock`: --constraints locks/test.txt)."""
    other, test = _locked_for(lock, python), _locked_for("test", python)
    assert {name: (version, test[name]) for name, version in other.items() if test.get(name, version) != version} == {}


def test_what_the_lock_installed_needs_nothing_the_lock_lacks() -> None:
    """Each package installed here at its locked version: all it requires on this Python is locked too.

    Under `make test` that is every package (the closure of the lock for this Python); under
    `make test-latest` or `make test-floor` only those still at their locked versions are checked.
    """
    python = "{}.{}".format(*__import__("sys").version_info[:2])
    locked = _locked_for("test", python)
    env = {**_environment(python), "python_full_version": __import__("platform").python_version()}
    checked, missing = 0, []
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if locked.get(name) != Version(dist.version):
            continue
        checked += 1
        for line in dist.requires or []:
            requirement = Requirement(line)
            if _applies(requirement.marker, env) and canonicalize_name(requirement.name) not in locked:
                missing.append(f"{name} needs {requirement}")
    assert checked > 0
    assert missing == []
