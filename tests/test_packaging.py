"""The version is written in one place, pyproject.toml's `version` (issue 32): `sidequest.__version__`,
`sidequest --version`, the dashboard's footer and the heartbeat read it from the installed
distribution's metadata. What the built wheel and sdist carry is checked on the files themselves
by .ci/wheel_check.py (`make dist-check`, run by .ci/run).
"""

from __future__ import annotations

import re
import subprocess
import tomllib

from conftest import PYTHON, ROOT, python_env

import sidequest

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_the_version_is_written_in_pyproject_only() -> None:
    literal = re.compile(rf"""["']{re.escape(VERSION)}["']""")
    copies = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "src").rglob("*.py"))
              if literal.search(path.read_text(encoding="utf-8"))]
    assert copies == [], f"the version {VERSION} is also written in {copies}: read it from the package's metadata"
    assert sidequest.__version__ == VERSION


def test_the_version_option_prints_pyprojects_version() -> None:
    out = subprocess.run([PYTHON, "-m", "sidequest.cli", "--version"], env=python_env(), capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.strip() == f"sidequest, version {VERSION}"
