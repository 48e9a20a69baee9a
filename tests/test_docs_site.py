"""The docs site (issue 42 item 3): `make docs` builds docs/ with MkDocs in strict mode (mkdocs.yml),
with an API reference generated from the docstrings (docs/reference.md, mkdocstrings). The build
itself runs in CI (.ci/run), with the tools of locks/docs.txt; these tests pin, without those tools,
what a contributor changing the public API or adding a page must keep true: the reference shows
every name `sidequest.__all__` exports, and the site's navigation holds every page of docs/.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

import yaml
from conftest import ROOT

import sidequest

DOCS = ROOT / "docs"
# a mkdocstrings block: `::: sidequest.something` on a line of its own
DIRECTIVE = re.compile(r"^::: (sidequest(?:\.\w+)*)\s*$", re.MULTILINE)
# pages the site takes from outside docs/ (.ci/docs_hooks.py): README.md as the home page, the changelog
PAGES_FROM_OUTSIDE = {"index.md", "CHANGELOG.md"}


def _documented(path: str) -> Any:
    """The object a `::: path` block renders, found as mkdocstrings (griffe) finds it: a submodule of
    that name first, then an attribute of its parent (so `::: sidequest.periodic` is the module,
    which the function `sidequest.periodic` hides)."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        parent, _, name = path.rpartition(".")
        module: ModuleType = importlib.import_module(parent)
        return getattr(module, name)


def test_the_api_reference_shows_every_exported_name() -> None:
    paths = DIRECTIVE.findall((DOCS / "reference.md").read_text(encoding="utf-8"))
    shown = [_documented(path) for path in paths]
    missing = [name for name in sidequest.__all__ if not any(obj is getattr(sidequest, name) for obj in shown)]
    assert missing == [], f"add a `::: sidequest.<name>` block for each to docs/reference.md: {missing}"
    assert len(paths) == len(set(paths)), "docs/reference.md shows a name twice"


def _nav_pages(entries: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_sites_navigation_holds_every_page_of_docs() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = _nav_pages(config["nav"])
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")} | PAGES_FROM_OUTSIDE
    assert sorted(pages - set(in_nav)) == [], "a page of docs/ the site leaves out: add it to mkdocs.yml's nav"
    assert sorted(set(in_nav) - pages) == [], "mkdocs.yml's nav names a page docs/ does not have"
    assert len(in_nav) == len(set(in_nav))


def _flattened(doc: str | None) -> bool:
    """A docstring whose every line after the summary is indented past its closing quotes: an example
    with no prose beside it, which `inspect.cleandoc` (help(), the site) turns into flush prose."""
    lines = (doc or "").split("\n")
    rest = [line for line in lines[1:-1] if line.strip()]
    closing = lines[-1] if len(lines) > 1 and not lines[-1].strip() else None
    return bool(rest) and closing is not None and min(len(x) - len(x.lstrip()) for x in rest) > len(closing)


def test_no_example_in_the_referenced_docstrings_loses_its_indentation() -> None:
    import sidequest.api

    objects = [getattr(sidequest, name) for name in sidequest.__all__]
    objects += [getattr(sidequest.api, name) for name in sidequest.api.__all__]
    objects += [member for obj in objects if isinstance(obj, type)
                for name, member in vars(obj).items() if not name.startswith("_")]
    flattened = sorted({getattr(obj, "__qualname__", repr(obj)) for obj in objects
                        if _flattened(getattr(obj, "__doc__", None))})
    assert flattened == [], f"write each example as a ```python block, or beside prose at the indent: {flattened}"
