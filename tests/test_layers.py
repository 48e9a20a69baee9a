"""The package's layers, read from its import graph: which package may import which, no circles, and
the size rules that keep the tree readable (issue 29).

The packages, bottom to top (a module may import its own package and any package below it):

    jobs < store < client < worker < features < api < web < cli < testing, contrib

plus the root modules `config` and `errors`, which every layer uses, the package root `__init__`
(the public API: it imports from every layer, and is imported inside the package only for
`__version__`), and the re-export modules that keep documented paths working (`sidequest.aio`,
`.launcher`, `.limiter`, ...: each says "a documented import path: the code lives in ...").

Every `import` of a sibling module counts, at module level, inside functions and under
TYPE_CHECKING alike, so a circle or a climb cannot hide behind a late import. The known exceptions
are the named sets below, each with its reason; a set entry that is no longer needed fails its
test too, so the sets only shrink.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sidequest.store.scripts import Scripts

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "sidequest"

# Bottom to top. A package's subpackages (worker.fetch, features.tasks, ...) belong to it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("jobs",),                # what a job is: definition, options, arguments, payload, registry, middleware
    ("store",),               # how commands reach Redis: keys, the core's scripts, connections, the dev server
    ("client",),              # pushing, sync and asyncio, over one push plan
    ("worker",),              # the delivery core: launcher, runners, processor, outcome, fetch/ ...
    ("features",),            # what plugs into the push and the job lifecycle: unique, limiter, tasks, ...
    ("api",),                 # the admin API
    ("web",),                 # the dashboard
    ("cli",),                 # the command line (`sidequest web` serves the dashboard)
    ("testing", "contrib"),   # users' test helpers; the integrations (optional extras)
)
ROOT_MODULES = {  # the root modules every layer uses -> the packages each may itself import
    "config": {"jobs", "store"},  # the middleware chain's type; a Redis URL's checks
    "errors": set(),
}

# -- the known exceptions: each a set of (importer, imported) pairs, a name matching itself and
#    everything under it (`features` is every feature module). Delete an entry when its reason goes.

# A job's definition is the user's API: `perform_async` pushes through the client, and `.s()` makes
# a workflow signature. The rest of jobs/ is data, without I/O.
JOB_DEFINITION_PUSHES = frozenset({
    ("jobs.definition", "client"),
    ("jobs.definition", "features.workflows.signature"),
})

KNOWN_EXCEPTIONS = JOB_DEFINITION_PUSHES


def _is_reexport(path: Path) -> bool:
    """A module that only keeps a documented import path working (its docstring says so)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return "a documented import path" in doc


def _modules() -> dict[str, Path]:
    """Each module's dotted name under the package (`worker.fetch.batch`; `__init__` for the root)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"] = path
    return found


def _is_module(dotted: str) -> bool:
    where = PACKAGE / dotted.replace(".", "/")
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def import_graph() -> dict[str, set[str]]:
    """Each module's dotted name -> the sibling modules it imports (`__init__`: a name taken from
    the package root itself, such as `__version__`)."""
    graph: dict[str, set[str]] = {}
    for name, path in _modules().items():
        package = name.split(".") if path.name == "__init__.py" and name != "__init__" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:  # relative: from . import x
                base = ".".join(package[:len(package) - node.level + 1])
                module = ".".join(p for p in (base, node.module or "") if p)
                found.update(f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module or "__init__"
                             for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and (node.module + ".").startswith("sidequest."):
                module = node.module.removeprefix("sidequest").removeprefix(".")
                for alias in node.names:  # `from sidequest.store import keys` imports the module `store.keys`
                    sub = f"{module}.{alias.name}" if module else alias.name
                    found.add(sub if _is_module(sub) else module or "__init__")
            elif isinstance(node, ast.Import):
                found.update(a.name.removeprefix("sidequest.") for a in node.names if a.name.startswith("sidequest."))
        graph[name] = found - {name}
    return graph


def _under(module: str, owner: str) -> bool:
    return module == owner or module.startswith(owner + ".")


def _excused(importer: str, imported: str) -> bool:
    return any(_under(importer, a) and _under(imported, b) for a, b in KNOWN_EXCEPTIONS)


def _used_exceptions(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, b in KNOWN_EXCEPTIONS
            for importer, imported in graph.items() if _under(importer, a)
            for module in imported if _under(module, b)}


def _layer(module: str) -> int | None:
    """The rank of `module`'s package in LAYERS; None for the root modules, `__init__`, re-exports."""
    top = module.split(".")[0]
    return next((rank for rank, layer in enumerate(LAYERS) if top in layer), None)


def _reexports() -> set[str]:
    return {name for name, path in _modules().items() if _is_reexport(path)}


def _reach(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module `module` imports, directly or through others, over edges not excused. The
    package root is not followed: it is imported inside the package only for `__version__`."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        for nxt in graph.get(current, ()):
            if nxt not in seen and nxt != "__init__" and not _excused(current, nxt):
                seen.add(nxt)
                todo.append(nxt)
    return seen


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


def test_every_package_is_in_a_layer():
    """A new package gets a place in LAYERS (and a row in docs/architecture.md), not a pass."""
    graph = import_graph()
    tops = {name.split(".")[0] for name in graph} - {"__init__"} - set(ROOT_MODULES) - _reexports()
    assert {top for top in tops if _layer(top) is None} == set()


def test_imports_only_go_down_the_layers():
    """A module imports its own package, the packages below it and the root modules; nothing above
    it, outside the named exceptions."""
    graph = import_graph()
    climbs = sorted(f"{importer} imports {imported}" for importer, imports in graph.items()
                    if (rank := _layer(importer)) is not None
                    for imported in imports if (other := _layer(imported)) is not None and other > rank
                    and not _excused(importer, imported))
    assert climbs == []
    stale = KNOWN_EXCEPTIONS - _used_exceptions(graph)
    assert stale == set(), f"no longer needed: delete {sorted(stale)} from its set in tests/test_layers.py"


def test_the_root_modules_import_only_what_they_are_allowed():
    graph = import_graph()
    for module, allowed in ROOT_MODULES.items():
        outside = {m for m in graph[module] if m.split(".")[0] not in allowed | set(ROOT_MODULES)}
        assert outside == set(), f"{module} imports {sorted(outside)}"


def test_the_package_root_is_imported_only_for_its_version():
    """`sidequest/__init__.py` imports every layer: a module that took more than `__version__` from
    it would climb over all of them."""
    for name, path in _modules().items():
        if name == "__init__" or _is_reexport(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "sidequest" and not node.level:
                names = {a.name for a in node.names if not _is_module(a.name)}
                assert names <= {"__version__"}, f"{name} imports {sorted(names)} from the package root"
            elif isinstance(node, ast.Import):
                assert "sidequest" not in {a.name for a in node.names}, f"{name} imports the package root"


def test_a_reexport_module_imports_only_the_module_it_names():
    for name, path in _modules().items():
        if not _is_reexport(path):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        [real] = re.findall(r"the code lives in `sidequest\.([\w.]+)`", doc)
        assert import_graph()[name] == {real}, name


def test_only_the_package_root_imports_a_reexport():
    """Inside the package a module is imported where its code lives; the old paths are for users."""
    graph = import_graph()
    reexports = _reexports()
    assert "aio" in reexports  # really found
    users = sorted(f"{module} imports {imported}" for module, imports in graph.items() if module != "__init__"
                   and module not in reexports for imported in imports if imported in reexports)
    assert users == []


@pytest.mark.parametrize("layer, seam, sample", [
    ("worker", "worker/lifecycle.py", ("worker.fetch.batch", "worker.processor")),
    ("client", "client/plugins.py, filled by features/registry.py", ("client.push_plan", "client.async_client")),
])
def test_a_layer_reaches_the_features_only_through_its_seam(layer, seam, sample):
    """The job's path through a worker process, and a push and a client's reads by jid, reach a
    feature only through their seam (`seam`), never by importing one, directly or through another
    module."""
    graph = import_graph()
    modules = [name for name in graph if _under(name, layer)]
    assert set(sample) <= set(modules)  # really read
    offenders = sorted(f"{module} reaches {feature}" for module in modules
                       for feature in _reach(graph, module) if _under(feature, "features"))
    assert offenders == [], f"past {seam}"


def _code_strings(path: Path) -> set[str]:
    """The string constants of a module's code: docstrings left out (they may name a feature as an
    example), as comments are."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs}


def test_the_worker_never_names_a_feature():
    """Nor by name: no string in the worker's code is a registered feature's name (the key of its
    Lua in FEATURES) or one of the payload keys that mark its jobs. The lifecycle asks features
    by what they declare (`marks`, `always_at`), so a new feature needs no line in worker/."""
    from sidequest.features import registry

    names = {plugin.name for plugin in registry.PLUGINS}
    marks = {mark for value in vars(registry).values() if isinstance(value, type)
             for mark in (getattr(value, "marks", None) or ())}
    assert {"steps", "unique"} <= names and "sidequest_steps" in marks  # really read
    offenders = sorted(f"{name}: {text!r}" for name, path in _modules().items() if _under(name, "worker")
                       for text in _code_strings(path) & (names | marks))
    assert offenders == []


def test_the_store_imports_neither_the_worker_nor_the_client_nor_a_feature():
    graph = import_graph()
    store = [name for name in graph if _under(name, "store")]
    assert "store.scripts" in store  # really read
    offenders = sorted(f"{module} reaches {other}" for module in store for other in _reach(graph, module)
                       if any(_under(other, p) for p in ("worker", "client", "features", "api", "web", "cli")))
    assert offenders == []


# What a job is, as data: no I/O below the definition (which pushes).
IO_LIBRARIES = ("redis", "socket", "asyncio", "subprocess", "selectors", "ssl", "http", "urllib")


def test_the_jobs_package_does_no_io():
    graph = import_graph()
    for name, path in _modules().items():
        if not _under(name, "jobs") or name == "jobs.definition":
            continue
        outside = {m for m in graph[name] if not _under(m, "jobs") and m not in ROOT_MODULES}
        assert outside == set(), f"{name} imports {sorted(outside)}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert not [n for n in names if n.split(".")[0] in IO_LIBRARIES], f"{name} imports {names}"


def test_a_feature_never_imports_the_admin_api():
    """The admin API may use features; a feature never reaches up into it (nor into web, cli)."""
    graph = import_graph()
    offenders = sorted(f"{module} reaches {other}" for module in graph if _under(module, "features")
                       for other in _reach(graph, module) if any(_under(other, p) for p in ("api", "web", "cli")))
    assert offenders == []


INTEGRATED = ("django", "fastapi", "flask", "opentelemetry", "sentry_sdk", "starlette.testclient")


def test_nothing_outside_contrib_imports_contrib_or_an_integrated_library():
    """The integrations are optional extras: the rest of the package works without them."""
    graph = import_graph()
    outside = {name for name in graph if not _under(name, "contrib")}
    assert "contrib.fastapi" in graph and "contrib.django.backend" in graph  # really read
    assert {name for name in outside if any(_under(dep, "contrib") for dep in graph[name])} == set()
    for path in PACKAGE.rglob("*.py"):
        if "contrib" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad = [n for n in names if n.split(".")[0] in INTEGRATED or n in INTEGRATED]
            assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


# The core's scripts (store/scripts.py). A feature's Lua lives beside the feature, not here.
CORE_SCRIPTS = {"_CORE_LIB", "SETTLE", "RESERVE", "RECOVER", "ENQUEUE_DUE", "RELEASE_LOCK", "FORGET_RESERVED",
                "ADMIN_REQUEUE", "ADMIN_KILL", "ADMIN_DELETE", "ADMIN_FORGET_QUEUE"}
CORE_BOUNDS = {"PUT_BACK_DEPTH"}  # numbers the core's Lua is rendered with (how far a look goes)


def _constants(path: Path) -> set[str]:
    """The module-level UPPER_CASE names `path` assigns."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and target.id.isupper()}


def test_scripts_holds_only_the_cores_moves():
    """A feature's Lua sits in the feature's own module (unique, results, limiter, ...)."""
    found = _constants(PACKAGE / "store" / "scripts.py")
    assert "SETTLE" in found  # the file is really read
    assert found - CORE_SCRIPTS - CORE_BOUNDS == set()
    graph = import_graph()
    assert {m for m in graph["store.scripts"] if not _under(m, "store")} == set()  # no feature's fragment


# -- sizes: a module a reader can hold in mind, a folder whose file list reads as a table of contents.

MAX_LINES = 500
MAX_MODULES = 15  # per package folder: .py files but __init__, __main__ and re-export modules

# Today's offenders, each being fixed by another helper of issue 29. Delete an entry once its
# branch is merged (the tests say when one is no longer needed).
MODULES_OVER_500_LINES: frozenset[str] = frozenset()
PACKAGES_OVER_15_MODULES: frozenset[str] = frozenset()


def test_no_module_is_over_500_lines():
    long = {str(path.relative_to(PACKAGE)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) - MODULES_OVER_500_LINES == set(), f"over {MAX_LINES} lines: {long}"
    stale = MODULES_OVER_500_LINES - set(long)
    assert stale == set(), f"now {MAX_LINES} lines or fewer: delete {sorted(stale)} from MODULES_OVER_500_LINES"


def test_no_package_folder_holds_more_than_15_modules():
    counts = {}
    for folder in [PACKAGE, *(p.parent for p in PACKAGE.rglob("__init__.py"))]:
        modules = [p for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__") and not _is_reexport(p)]
        counts[str(folder.relative_to(PACKAGE)) if folder != PACKAGE else "."] = len(modules)
    assert counts["worker"] > 5  # really counted
    crowded = {folder: n for folder, n in counts.items() if n > MAX_MODULES}
    assert set(crowded) - PACKAGES_OVER_15_MODULES == set(), f"over {MAX_MODULES} modules: {crowded}"
    stale = PACKAGES_OVER_15_MODULES - set(crowded)
    assert stale == set(), f"now {MAX_MODULES} modules or fewer: delete {sorted(stale)} from PACKAGES_OVER_15_MODULES"


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
