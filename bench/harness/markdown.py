"""The results as GitHub markdown: a header line, the terminal's two tables (same columns, units and
ratios), the rows' notes, versions, the Redis ceiling, backlog and goals (report.py's text), and
what was skipped or failed. Written as bench/results/latest.md (and <UTC time>.md next to its
JSON); a full run also puts it between the `bench:begin`/`bench:end` lines of docs/performance.md."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from . import report
from .report import Extra
from .rows import BENCH, REFERENCE, RESULTS, TIMES

DOCS_PAGE = BENCH.parent / "docs" / "performance.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def esc(text: str) -> str:
    """Free text made inert: no table breaks, emphasis or HTML from `|`, `*`, `_`, `<`."""
    return re.sub(r"([\\|*_<])", r"\\\1", text)


def when(stamp: str) -> str:
    try:
        return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return stamp


def header(doc: dict[str, Any]) -> str:
    m, s = doc["machine"], doc["settings"]
    return (f"{when(doc['started'])}: {m['cpu_count']} CPUs ({esc(m['cpu_model'])}), Redis {m['redis_version']}, "
            f"{s['jobs']:,} no-op jobs per throughput run, {s['rounds']} round(s). Each figure is the median over "
            f"interleaved rounds; {TIMES} is the median of the per-round ratios to {REFERENCE} (the same round's "
            "figure); ↑ higher is better, ↓ lower.")


def md_cell(doc: dict[str, Any], row_id: str, key: str) -> str:
    parts = report.cell_parts(doc, row_id, key)
    if parts is None:
        return "n/a"
    text, ratio = parts
    if ratio is None:
        return text
    return f"{text} {ratio}" if ratio != "n/a" else f"{text} {TIMES}n/a"


def md_table(doc: dict[str, Any], title: str, keys: list[str], extra: list[Extra], rows: list[dict[str, Any]]) -> str:
    headings = [report.heading(key) for key in keys] + [lines for lines, _ in extra]
    lines = [f"**{esc(title)}**", "",
             "| configuration | " + " | ".join(f"{label}<br>{unit}" for label, unit in headings) + " |",
             "|:--|" + "--:|" * len(headings)]
    for i, row in enumerate(rows):
        cells = [md_cell(doc, row["id"], key) for key in keys] + [cells[i] or "n/a" for _, cells in extra]
        lines.append(f"| {esc(row['label'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bullets(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def render(doc: dict[str, Any]) -> str:
    """The whole document: blocks separated by blank lines, ending with a newline."""
    blocks = [header(doc), *(md_table(doc, *parts) for parts in report.tables(doc)),
              bullets([f"{esc(row['label'])}: {esc(row['note'])}" for row in doc["rows"] if row.get("note")]),
              esc(report.versions_line(doc))]
    if line := report.ceiling_line(doc):
        blocks.append(f"{esc(line)}. {report.LOAD_HEADING[0]} (first table): each row's jobs/s {TIMES} Redis "
                      "commands per job, as a share of that INCR ceiling.")
    goals = [*report.baseline_lines(doc), *report.fairness_lines(doc), *report.backlog_lines(doc),
             *report.goal_lines(doc, lambda met: "met" if met else "missed")]
    blocks.append(bullets([esc(line) for line in goals]))
    if found := report.problems(doc):
        lines = [f"{kind} {esc(text)}" for kind, text, _ in found]
        blocks.append("Skipped, noted or failed in this run:\n" + bullets(lines))
    blocks.append(f"Command: `{' '.join(doc.get('command', []))}`; raw figures: bench/results/{doc['started']}.json.")
    return "\n\n".join(block for block in blocks if block) + "\n"


def write_markdown(text: str, stamp: str | None = None) -> list[Path]:
    """latest.md, and <stamp>.md when given; return the files written."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    paths = [RESULTS / "latest.md"] + ([RESULTS / f"{stamp}.md"] if stamp else [])
    for path in paths:
        path.write_text(text, encoding="utf-8")
    return paths


def update_docs(text: str, page: Path = DOCS_PAGE) -> bool:
    """Replace what lies between the marker lines of `page` with `text`; the rest stays byte for byte."""
    lines = page.read_bytes().decode("utf-8").splitlines(keepends=True) if page.exists() else []
    marks = [i for i, line in enumerate(lines) if line.strip() in (BEGIN, END)]
    kinds = [lines[i].strip() for i in marks]
    if kinds != [BEGIN, END]:
        print(f"{page}: not updated (needs one line {BEGIN} and, after it, one line {END})")
        return False
    begin, end = marks
    page.write_bytes(("".join(lines[:begin + 1]) + "\n" + text + "\n" + "".join(lines[end:])).encode("utf-8"))
    return True
