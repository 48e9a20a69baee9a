"""Every documented import path still imports (issue 29): each `from sidequest... import ...` and
`import sidequest...` written in README.md, docs/*.md and examples/, read from those files at each
run (nothing to keep in step by hand), plus the paths the issue names. A path that a re-export
module keeps alive after its code moved is the very module it names, so patching either patches
the code (`sidequest.limiter is sidequest.features.limiter`).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import PYTHON, ROOT, STARTUP, python_env

SOURCES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.py"),
                  *(ROOT / "examples").rglob("*.md")])

# At the start of a line of code, or of an inline `code` span in prose.
FROM = re.compile(r"(?:^|`)[ \t]*from[ \t]+(sidequest(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#`;]*)", re.M)
IMPORT = re.compile(r"(?:^|`)[ \t]*import[ \t]+(sidequest(?:\.\w+)*(?:[ \t]*,[ \t]*sidequest(?:\.\w+)*)*)", re.M)

# The paths the issue names, whether or not a page shows an import of them today.
NAMED_BY_THE_ISSUE = ["sidequest", "sidequest.aio", "sidequest.api", "sidequest.web", "sidequest.cli",
                      "sidequest.testing", "sidequest.launcher", "sidequest.periodic", "sidequest.iteration",
                      "sidequest.limiter", "sidequest.tasks", "sidequest.tasks.http", "sidequest.signals",
                      "sidequest.config", "sidequest.pytest_plugin", "sidequest.contrib.django",
                      "sidequest.contrib.fastapi", "sidequest.contrib.flask", "sidequest.contrib.opentelemetry",
                      "sidequest.contrib.sentry"]


def documented() -> dict[str, set[str]]:
    """Each documented module path -> the names imported from it (empty for `import path`)."""
    found: dict[str, set[str]] = {path: set() for path in NAMED_BY_THE_ISSUE}
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        for module, names in FROM.findall(text):
            for name in names.strip("() \t\n\\").replace("\\\n", " ").split(","):
                name = name.split(" as ")[0].strip()
                found.setdefault(module, set())
                if name.isidentifier():
                    found[module].add(name)
        for modules in IMPORT.findall(text):
            for module in modules.split(","):
                found.setdefault(module.strip(), set())
    return found


DOCUMENTED = documented()


def _import(module: str) -> object:
    """Import `module`; an integration whose library is not installed is skipped, with the fix."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if module.startswith("sidequest.contrib.") and missing and missing != "sidequest":
            pytest.skip(f"{module} needs {missing}, which is not installed (its extra: pip install 'sidequest[...]')")
        raise


def test_the_documented_paths_are_really_read():
    assert sum(len(names) for names in DOCUMENTED.values()) > 30
    assert set(DOCUMENTED) - set(NAMED_BY_THE_ISSUE)  # paths the pages import beyond the issue's list
    assert {"Launcher"} <= DOCUMENTED["sidequest.launcher"]
    assert {"Stats", "Queue"} <= DOCUMENTED["sidequest.api"]
    assert "sidequest.testing" in DOCUMENTED and "sidequest.contrib.fastapi" in DOCUMENTED


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_a_documented_path_imports_with_each_name_the_docs_take_from_it(module, tmp_path):
    _import(module)
    names = sorted(DOCUMENTED[module])
    if module.startswith("sidequest.contrib.django") and names:
        missing = _django_names(module, names, tmp_path)
    else:
        missing = []
        for name in names:
            try:
                exec(f"from {module} import {name}", {})  # exactly what the docs write
            except ImportError:
                missing.append(name)
    assert missing == [], f"documented, gone: from {module} import {', '.join(missing)}"


def _django_names(module: str, names: list[str], tmp_path: Path) -> list[str]:
    """The names of the Django integration that a project imports once Django is set up (its
    urls.py, its apps): imported in a subprocess on the example shop (tests/django_project), since
    Django can be set up only once in a process."""
    code = "\n".join(["import django", "django.setup()", f"for name in {names!r}:",
                      "    try:", f"        exec('from {module} import ' + name, {{}})",
                      "    except ImportError:", "        print(name)"])
    env = python_env(DJANGO_SETTINGS_MODULE="shopsite.settings", SHOP_DB=str(tmp_path / "shop.sqlite3"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "django_project"), env["PYTHONPATH"]])
    run = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=STARTUP * 3)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def _reexports() -> dict[str, str]:
    """Each re-export module (its docstring: "a documented import path: the code lives in `...`")
    -> the module holding its code."""
    package = ROOT / "src" / "sidequest"
    found = {}
    for path in package.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if "a documented import path" in doc:
            parts = path.relative_to(package).with_suffix("").parts
            name = ".".join(["sidequest", *(parts[:-1] if parts[-1] == "__init__" else parts)])
            [real] = re.findall(r"the code lives in `(sidequest\.[\w.]+)`", doc)
            found[name] = real
    return found


REEXPORTS = _reexports()


def test_the_issues_moved_paths_are_reexports():
    assert {"sidequest.aio", "sidequest.launcher", "sidequest.limiter", "sidequest.periodic", "sidequest.iteration",
            "sidequest.signals", "sidequest.tasks", "sidequest.tasks.http", "sidequest.pytest_plugin"} <= set(REEXPORTS)


@pytest.mark.parametrize("path", sorted(REEXPORTS))
def test_a_reexport_is_the_module_it_names(path):
    """One module under two names: patching `sidequest.limiter.x` patches the code. A package kept as
    a package (`sidequest.tasks`, which holds `sidequest.tasks.http`) shows the same objects."""
    old, real = importlib.import_module(path), importlib.import_module(REEXPORTS[path])
    parent, _, leaf = path.rpartition(".")
    if Path(old.__file__ or "").name == "__init__.py" and old is not real:
        assert old.__all__ == real.__all__
        assert [name for name in real.__all__ if getattr(old, name) is not getattr(real, name)] == []
    else:
        assert old is real
        assert sys.modules[path] is real
        attribute = getattr(importlib.import_module(parent), leaf)
        # `sidequest.periodic`, the attribute, is the decorator: the package root exports it over the module
        assert attribute is real or not isinstance(attribute, ModuleType)
