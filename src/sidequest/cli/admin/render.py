"""How admin commands print: aligned tables (rich) for people, one JSON document for scripts.

Whatever comes from Redis (job arguments, error messages, queue names) is printed as plain
text: the console reads no markup, so `[bold]` in an argument shows as those characters, and
rich drops control characters, so an argument cannot move the cursor or clear the screen.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 200  # columns when the output is not a terminal: a pipe gets whole rows, unwrapped


def console() -> Console:
    """A console on stdout: the terminal's width (and colours) there, a wide plain one in a pipe."""
    tty = sys.stdout.isatty()
    return Console(highlight=False, markup=False, emoji=False, width=None if tty else PIPE_WIDTH)


def table(*headers: str, title: str | None = None, right: Iterable[str] = ()) -> Table:
    """A table with aligned columns under upper-case headers; `right` names right-aligned ones."""
    aligned = set(right)
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold",
                 title=Text(title, style="bold") if title else None, title_justify="left")
    for header in headers:
        grid.add_column(header, justify="right" if header in aligned else "left",
                        no_wrap=header in ("JID", "IDENTITY", "ID"), overflow="fold")
    return grid


def facts(rows: Iterable[tuple[str, Any]], title: str | None = None) -> Table:
    """A two-column table of names and values (one job, one task, the totals)."""
    grid = Table(box=None, show_header=False, pad_edge=False,
                 title=Text(title, style="bold") if title else None, title_justify="left")
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in rows:
        grid.add_row(name, value if isinstance(value, Text) else Text(cell(value)))
    return grid


def row(grid: Table, *cells: Any) -> None:
    """Add a row of plain-text cells (never read as markup)."""
    grid.add_row(*(c if isinstance(c, Text) else Text(cell(c)) for c in cells))


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def emit_json(document: Any) -> None:
    """Print one JSON document (indented; every time in epoch seconds, as the admin API gives them)."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


def brief(value: Any, width: int = 60) -> str:
    """A JSON value on one line, cut to `width` characters with an ellipsis."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= width else text[:width - 1] + "…"


def span(seconds: float) -> str:
    """A duration for people: 0.4s, 12s, 3m 20s, 2h 5m, 3d 4h."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            rest = (whole % size) // subsize
            return f"{whole // size}{unit} {rest}{sub}" if rest else f"{whole // size}{unit}"
    return f"{whole}s"


def ago(at: float | None, now: float | None = None) -> str:
    """An epoch time relative to now: `3m ago`, `in 12s`; `-` for none."""
    if at is None:
        return "-"
    delta = (time.time() if now is None else now) - at
    return f"{span(delta)} ago" if delta >= 0 else f"in {span(-delta)}"


def stamp(at: float | None) -> str:
    """An epoch time as UTC with how far away it is: `2026-11-23 13:00:05 UTC (3m ago)`."""
    if at is None:
        return "-"
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(at))} UTC ({ago(at)})"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
