"""The package's import graph has no circles: lower layers never import higher ones.

Every `import` of a sibling module counts, at module level, inside functions and under
TYPE_CHECKING alike, so a circle cannot hide behind a late import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sidequest.store.scripts import Scripts

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "sidequest"


def import_graph() -> dict[str, set[str]]:
    """Each module's dotted name (`api.actions`, `__init__` for the package) -> the modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        package = parts[:-1]  # where a relative import starts
        name = ".".join(package if parts[-1] == "__init__" else parts) or "__init__"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(package[:len(package) - node.level + 1])
                if node.module:
                    found.add(".".join([*base, node.module]))
                else:
                    found.update(".".join([*base, alias.name]) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and (node.module + ".").startswith("sidequest."):
                base_name = node.module.removeprefix("sidequest").removeprefix(".")
                for alias in node.names:  # `from sidequest.store import keys` imports the module `store.keys`
                    sub = f"{base_name}.{alias.name}" if base_name else alias.name
                    is_module = (PACKAGE / sub.replace(".", "/")).with_suffix(".py").exists() or \
                        (PACKAGE / sub.replace(".", "/")).is_dir()
                    found.add(sub if is_module else base_name or "__init__")
            elif isinstance(node, ast.Import):
                found.update(a.name.removeprefix("sidequest.") for a in node.names if a.name.startswith("sidequest."))
        graph[name] = found - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary circle, each reported once from its smallest member."""
    found: list[list[str]] = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.append([*path, start])
            elif nxt not in path and nxt > start:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        if start != "__init__":
            walk(start, start, [start])
    return found


def test_no_import_circles():
    graph = import_graph()
    assert "worker.fetch.fetchers" in graph["worker.processor"]  # the graph is really read
    assert cycles(graph) == []


def _of(module: str, owners: tuple[str, ...]) -> bool:
    return any(module == owner or module.startswith(owner + ".") for owner in owners)


# The worker, launcher and supervisor included. It reaches a feature only through the lifecycle
# seam (`lifecycle`), which `features.registry` fills when sidequest is imported: the features'
# operations, the per-job metrics' `heartbeat.Flush`, the periodic scheduler's thread. None of
# these modules imports a feature.
CORE = tuple(sorted(
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in (PACKAGE / "worker").rglob("*.py")
    if p.name != "__init__.py"))

# Not followed when looking for what a module reaches: the push (`client`) uses features of its
# own (a unique claim, a status record at push), so a worker module may push or connect through it
# without naming a feature; and the package's root (`from sidequest import __version__`), which
# Python imports before any module of the package anyway.
THROUGH_NOT = ("client", "__init__")

# The features that plug into the lifecycle, each a module or a package of its own.
FEATURES = ("features",)


def _reach(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module `module` imports, directly or through others (not through THROUGH_NOT)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                if not _of(nxt, THROUGH_NOT):
                    todo.append(nxt)
    return seen


def test_the_core_never_names_a_feature():
    """No worker module imports a feature module (nor a module of a feature's package), directly or
    through another module."""
    graph = import_graph()
    for module in (*CORE, "worker.launcher", "worker.supervisor", "features.unique"):
        assert module in graph, f"{module} is no longer a module or package: update CORE or FEATURES"
    offenders = sorted(f"{core} reaches {imported}" for core in CORE for imported in _reach(graph, core)
                       if _of(imported, FEATURES))
    assert offenders == []
    for core in CORE:
        # asyncio's tasks are not the feature; the lifecycle seam names the features that use it
        if core.rpartition(".")[2] not in ("executor", "asyncio_runner", "loop_fetch", "acknowledger", "lifecycle"):
            assert "task" not in (PACKAGE / f"{core.replace('.', '/')}.py").read_text(encoding="utf-8").lower(), core


def test_a_feature_never_imports_the_admin_api():
    """The admin API may use features; a feature never reaches up into it."""
    graph = import_graph()
    offenders = sorted(f"{module} imports {imported}" for module, imported_ in graph.items() if _of(module, FEATURES)
                       for imported in imported_ if _of(imported, ("api",)) and imported != "api.health")
    assert offenders == []


# The core's scripts (scripts.py). A feature's Lua lives beside the feature, not here.
CORE_SCRIPTS = {"_CORE_LIB", "SETTLE", "RESERVE", "RECOVER", "ENQUEUE_DUE", "RELEASE_LOCK", "FORGET_RESERVED",
                "ADMIN_REQUEUE", "ADMIN_KILL", "ADMIN_DELETE", "ADMIN_FORGET_QUEUE"}


def _constants(path: Path) -> set[str]:
    """The module-level UPPER_CASE names `path` assigns."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and target.id.isupper()}


INTEGRATED = ("django", "fastapi", "flask", "opentelemetry", "sentry_sdk", "starlette.testclient")


def test_nothing_outside_contrib_imports_contrib_or_an_integrated_library():
    """The integrations are optional extras: the rest of the package works without them."""
    graph = import_graph()
    outside = {name for name in graph if not name.startswith("contrib")}
    assert "contrib.fastapi" in graph and "contrib.django.backend" in graph  # really read
    assert not {name for name in outside if any(dep.startswith("contrib") for dep in graph[name])}
    for path in PACKAGE.rglob("*.py"):
        if "contrib" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad = [n for n in names if n.split(".")[0] in INTEGRATED or n in INTEGRATED]
            assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_scripts_holds_only_the_cores_moves():
    """A feature's Lua sits in the feature's own module (unique, results, limiter, ...)."""
    found = _constants(PACKAGE / "store" / "scripts.py")
    assert "SETTLE" in found  # the file is really read
    assert found - CORE_SCRIPTS == set()


def test_the_architecture_guides_feature_runs_in_a_real_move(r):
    """docs/architecture.md's example feature runs as written, and its Lua inside a core move."""
    text = (PACKAGE.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    [snippet] = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    scope: dict[str, object] = {}
    exec(compile(snippet, "docs/architecture.md", "exec"), scope)
    lifecycle, job = scope["lifecycle"], scope["job"]
    settle = Scripts(r, lifecycle.lua).settle  # a basic-fetch acknowledgement: nothing to check first
    assert settle(keys=["unused", "queues"], args=["0", b"job", "ack", b"", 0, "", 0, 0, 1234.5, "finished",
                                                  *lifecycle.ops("finished", job)]) == 1
    assert r.hgetall("sidequest:last-run") == {b"Report": b"1234.5"}
