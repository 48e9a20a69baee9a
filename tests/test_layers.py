"""The package's import graph has no circles: lower layers never import higher ones.

Every `import` of a sibling module counts, at module level, inside functions and under
TYPE_CHECKING alike, so a circle cannot hide behind a late import.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "sidequest"


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        name = name.removesuffix(".__init__") if name != "__init__" else "__init__"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module)
                else:
                    found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sidequest."):
                found.add(node.module.removeprefix("sidequest."))
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
    assert "processor" in graph and "fetch" in graph["processor"]  # the graph is really read
    assert cycles(graph) == []


def test_the_core_never_names_a_feature():
    """fetch, processor, manager and retry reach tasks only through the lifecycle seam."""
    graph = import_graph()
    for core in ("fetch", "processor", "manager", "retry", "recovery"):
        assert "tasks" not in graph[core], core
        assert "task" not in (PACKAGE / f"{core}.py").read_text(encoding="utf-8").lower(), core
