"""MkDocs hooks for the docs site (mkdocs.yml's `hooks:`): the repository's pages, read as on GitHub.

The Markdown is written for the repository: README.md links `docs/jobs.md`, a page in docs/ links
`../README.md#install` or `../examples/testing/`. The site keeps those files as they are and maps
the repository onto itself here, so neither the pages nor their links are written twice:
- README.md becomes the home page (index.md) and CHANGELOG.md a page of its own;
- a relative link is resolved from the file's place in the repository: to a file the site holds,
  it becomes the link between the two pages; to another file of the repository (an example, a
  source file), a link to it in the repository's browser (mkdocs.yml's `repo_url`);
- a link to nothing is left as written, for MkDocs to report (a warning: strict mode fails).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"
# repository path -> the page it is on the site, for the files outside docs/
OUTSIDE_PAGES = {"README.md": "index.md", "CHANGELOG.md": "CHANGELOG.md"}
LINK = re.compile(r"\]\((?P<target>[^)\s#]*)(?P<fragment>#[^)\s]*)?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for repo_path, site_path in OUTSIDE_PAGES.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, **_: Any) -> str:
    site_dir = posixpath.dirname(page.file.src_uri)
    here = _repo_path(page.file.src_uri)
    repo_url = (config.repo_url or "").rstrip("/")

    def mapped(match: re.Match[str]) -> str:
        target, fragment = match["target"], match["fragment"] or ""
        if not target or EXTERNAL.match(target) or target.startswith("/"):
            return match[0]
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(here), target))
        site_path = _site_path(repo_path)
        if site_path is not None:
            return f"]({posixpath.relpath(site_path, site_dir or '.')}{fragment})"
        if repo_url and (ROOT / repo_path).exists():
            kind = "tree" if (ROOT / repo_path).is_dir() else "blob"
            return f"]({repo_url}/{kind}/main/{repo_path}{fragment})"
        return match[0]

    return LINK.sub(mapped, markdown)


def _repo_path(site_path: str) -> str:
    """Where a page of the site lives in the repository."""
    outside = {page: repo for repo, page in OUTSIDE_PAGES.items()}
    return outside.get(site_path, f"{DOCS}/{site_path}")


def _site_path(repo_path: str) -> str | None:
    """The site's path of a file of the repository, or None when the site does not hold it."""
    if repo_path in OUTSIDE_PAGES:
        return OUTSIDE_PAGES[repo_path]
    if repo_path.startswith(f"{DOCS}/"):
        return repo_path.removeprefix(f"{DOCS}/")
    return None
