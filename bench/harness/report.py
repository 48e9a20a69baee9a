"""The results: two tables on the terminal (rich), every raw figure in JSON under bench/results/.

Each cell is the median over rounds, then (after a multiplication sign) the median over rounds of
(this row's figure / Sidekiq's figure in the same round); n/a when a phase failed or cannot apply.
The plain-text pieces (cells, headings, the lines under the tables) are shared with `markdown`."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from . import group_report
from .rounds import median, ratios_in_rounds
from .rows import ASYNC_GOAL, ASYNC_ROW, ASYNCIO_PEERS, FIGURE, REFERENCE, RESULTS, TIMES

THROUGHPUT_COLUMNS = ["throughput", "bulk_enqueue", "single_enqueue", "cpu_us_per_job", "redis_cpu_us_per_job",
                      "commands_per_job", "commands_besides_job"]
LATENCY_COLUMNS = ["latency_p50_ms", "latency_p99_ms", "sched_p50_s", "sched_p99_s", "sched_max_s",
                   "peak_rss_mb", "idle_rss_mb", "idle_rss_max_mb"]
ACK_COLUMNS = ["ack_p50_ms", "ack_p99_ms", "ack_max_ms"]
ACK_EXTRA = [(("batch-list jobs", "of them"), "ack_batch_jobs", 0),
             (("batch-list jobs", "stay p99 ms"), "ack_batch_p99_ms", 2),
             (("jobs taken alone", "stay p99 ms"), "ack_alone_p99_ms", 2),
             (("resolution", "p50 ms"), "ack_resolution_p50_ms", 2)]
BASELINE_FIGURES = ["throughput", "cpu_us_per_job", "redis_cpu_us_per_job", "commands_per_job", "latency_p50_ms"]
IDLE_RSS_GOAL_MB = 40
LOAD_HEADING = ("Redis load", "% INCR ceiling")

Extra = tuple[tuple[str, str], list[str | None]]  # a column after the figures: (heading lines, a cell per row)


# -- plain text, shared with markdown.py ---------------------------------------------------------------------
def ratio_text(ratio: float) -> str:
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.1g}"


def cell_parts(doc: dict[str, Any], row_id: str, key: str) -> tuple[str, str | None] | None:
    """(value, ratio) of one cell: ratio TIMES + ratio_text, "n/a" when missing, None for the reference (or
    with no reference row); None instead of the pair when the figure itself is n/a."""
    value = doc["medians"].get(row_id, {}).get(key)
    if value is None:
        return None
    text = f"{value:,.{FIGURE[key].digits}f}"
    if row_id == REFERENCE or doc["medians"].get(REFERENCE, {}).get(key) is None:
        return text, None  # no ratio where the reference has no such figure (the ack window)
    ratio = doc["ratios"].get(row_id, {}).get(key)
    return text, f"{TIMES}{ratio_text(ratio)}" if ratio is not None else "n/a"


def heading(key: str) -> tuple[str, str]:
    figure = FIGURE[key]
    return figure.label, f"{figure.unit} {'↑' if figure.higher_is_better else '↓'}"


Table = tuple[str, list[str], list[Extra], list[dict[str, Any]]]  # title, figure keys, extra columns, rows


def tables(doc: dict[str, Any]) -> list[Table]:
    """The two tables of every row, and the acknowledgement window's of the rows that measured it."""
    s = doc["settings"]
    found: list[Table] = [
        ("Throughput and cost", THROUGHPUT_COLUMNS, [(LOAD_HEADING, ceiling_share(doc))], doc["rows"]),
        (f"Latency (idle worker), scheduled lateness ({s['sched_count']} jobs over {s['sched_over']:.0f} s), "
         "memory", LATENCY_COLUMNS, [], doc["rows"])]
    acked = [row for row in doc["rows"] if any(doc["medians"].get(row["id"], {}).get(key) is not None
                                               for key in ACK_COLUMNS)]
    if acked:
        found.append((f"Acknowledgement window: how long a job stays in Redis after it finished ({s.get('ack_jobs')} "
                      "jobs of 0 or 50 ms in bursts; an upper bound, see docs/performance.md)",
                      ACK_COLUMNS, ack_extra(doc, acked), acked))
    return found


def ack_extra(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[Extra]:
    """Medians over rounds of the ack window's details: the jobs taken through the batch list (how
    many, p99), the p99 of those a processor took alone (acknowledged at once by every version:
    the floor the machine sets), and the gap between two snapshots."""
    columns: list[Extra] = []
    for lines, key, digits in ACK_EXTRA:
        cells: list[str | None] = []
        for row in rows:
            found = median([r["results"][row["id"]]["details"][key] for r in doc["rounds"]
                            if r["results"].get(row["id"], {}).get("details", {}).get(key) is not None])
            cells.append(None if found is None else f"{found:,.{digits}f}")
        columns.append((lines, cells))
    return columns


def setup_text(doc: dict[str, Any]) -> str:
    m, s = doc["machine"], doc["settings"]
    return (f"{m['cpu_count']} CPUs ({m['cpu_model']}), Redis {m['redis_version']}, {s['jobs']:,} no-op jobs, "
            f"median of {s['rounds']} round(s)")


def ceiling_share(doc: dict[str, Any]) -> list[str | None]:
    """Redis commands/s each row's throughput needs, as a share of the INCR ceiling (None: n/a, as
    for a Cluster row: the ceiling is the one redis-server's)."""
    incr = doc.get("ceiling", {}).get("INCR")
    found: list[str | None] = []
    for row in doc["rows"]:
        m = doc["medians"].get(row["id"], {})
        ok = incr and m.get("throughput") and m.get("commands_per_job") and not row.get("cluster")
        found.append(f"{m['throughput'] * m['commands_per_job'] / incr:.0%}" if ok else None)
    return found


def versions_line(doc: dict[str, Any]) -> str:
    parts = []
    for peer, found in doc.get("versions", {}).items():
        details = ", ".join(f"{name} {version}" for name, version in found.items() if name != peer)
        parts.append(f"{peer} {found.get(peer, '?')} ({details})")
    return "versions: " + "; ".join(parts)


def ceiling_line(doc: dict[str, Any]) -> str | None:
    c = doc.get("ceiling", {})
    names = [name for name in ("INCR", "LPUSH", "RPOP", "EVALSHA") if name in c]
    if not names:
        return None
    figures = ", ".join(f"{name} {c[name]:,.0f}/s" for name in names)
    return f"Redis ceiling (redis-benchmark, {c.get('clients')} clients, this server): {figures}"


def backlog_lines(doc: dict[str, Any]) -> list[str]:
    s, found = doc["settings"], []
    for row in doc["rows"]:
        m = doc["medians"].get(row["id"], {})
        if m.get("backlog_jobs_per_s") is not None:
            ratio = m.get("backlog_ratio")
            found.append(f"backlog, {row['label']}: {m['backlog_jobs_per_s']:,.0f} jobs/s for the first "
                         f"{s['jobs']:,} of {s['backlog_jobs']:,} waiting; {'n/a' if ratio is None else f'{ratio:.2f}'}"
                         f" of the rate with {s['jobs']:,} waiting (goal ≥ 0.90)")
    return found


def baseline_lines(doc: dict[str, Any]) -> list[str]:
    """Each row against its baseline row, same round: the median of the per-round ratios."""
    found = []
    labels = {row["id"]: row["label"] for row in doc["rows"]}
    for row in doc["rows"]:
        mine = row.get("baseline_of")
        if not mine or mine not in labels:
            continue
        parts = []
        for key in BASELINE_FIGURES:
            ratios = ratios_in_rounds(doc["rounds"], mine, key, row["id"])
            if ratios:
                each = ", ".join(ratio_text(r) for r in ratios)
                parts.append(f"{FIGURE[key].label} {TIMES}{ratio_text(median(ratios) or 0)}"
                             + (f" ({each})" if len(ratios) > 1 else ""))
        if parts:
            found.append(f"{labels[mine]} / {row['label']}, same round: {'; '.join(parts)}")
    return found


def fairness_lines(doc: dict[str, Any]) -> list[str]:
    """The group rows against their references, same round (harness/groups.py)."""
    return group_report.lines(doc)


def async_lines(doc: dict[str, Any], mark: Callable[[bool], str]) -> list[str]:
    """The async row (and its baseline rows) against the fastest asyncio peer of the same run, by
    median throughput: the median of the per-round ratios to that peer (as the table's ratios are to Sidekiq's)."""
    medians = doc["medians"]

    def jobs(row: dict[str, Any]) -> float | None:
        value: float | None = medians.get(row["id"], {}).get("throughput")
        return value

    peers = [row for row in doc["rows"] if row["peer"] in ASYNCIO_PEERS and not row.get("src") and jobs(row)]
    best = max(peers, key=lambda row: jobs(row) or 0, default=None)
    found = []
    for row in doc["rows"]:
        if ASYNC_ROW not in (row["id"], row.get("baseline_of")) or (mine := jobs(row)) is None:
            continue
        head = f"async no-op jobs, {row['label']}: {mine:,.0f} jobs/s"
        if best is None:
            found.append(f"{head}; no asyncio peer ({', '.join(ASYNCIO_PEERS)}) measured in this run "
                         f"(goal ≥ {ASYNC_GOAL:g}{TIMES} the best: n/a)")
            continue
        top = jobs(best) or 0
        ratio = median(ratios_in_rounds(doc["rounds"], row["id"], "throughput", best["id"])) or mine / top
        found.append(f"{head}, {TIMES}{ratio_text(ratio)} the best asyncio peer ({best['label']}, {top:,.0f} "
                     f"jobs/s) (goal ≥ {ASYNC_GOAL:g}: {mark(ratio >= ASYNC_GOAL)})")
    return found


def goal_lines(doc: dict[str, Any], mark: Callable[[bool], str]) -> list[str]:
    """The async row's goal (`async_lines`) and the idle-RSS goal of each sidequest row; `mark(met)`
    renders "met"/"missed"."""
    found = async_lines(doc, mark)
    for row in doc["rows"]:
        biggest = doc["medians"].get(row["id"], {}).get("idle_rss_max_mb")
        if row["peer"] == "sidequest" and biggest is not None:
            found.append(f"idle RSS per process, {row['label']}: largest {biggest:.1f} MB "
                         f"(goal ≤ {IDLE_RSS_GOAL_MB} MB: {mark(biggest <= IDLE_RSS_GOAL_MB)})")
    return found


def problems(doc: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(kind: skipped|note|n/a, text, the error's further lines) of the peers skipped and the phases noted or failed."""
    found = [("skipped", f"{peer}: {reason}", []) for peer, reason in doc.get("skipped", {}).items()]
    for rnd in doc["rounds"]:
        for row_id, result in rnd["results"].items():
            found += [("note", f"round {rnd['round']} {row_id}: {note}", []) for note in result["notes"]]
            for phase, error in result["errors"].items():
                lines = error.strip().splitlines()
                found.append(("n/a", f"round {rnd['round']} {row_id} {phase}: {lines[0] if lines else ''}",
                              lines[1:][-6:]))
    return found


# -- the terminal -------------------------------------------------------------------------------------------
def console() -> Console:
    width = shutil.get_terminal_size((160, 40)).columns if sys.stdout.isatty() else 160
    return Console(width=max(width, 100))


def cell(doc: dict[str, Any], row_id: str, key: str) -> str:
    parts = cell_parts(doc, row_id, key)
    if parts is None:
        return "[dim]n/a[/]"
    text, ratio = parts
    if ratio is None:
        return text
    return f"{text} [cyan]{ratio}[/]" if ratio != "n/a" else f"{text} [dim]{TIMES}n/a[/]"


def table(doc: dict[str, Any], title: str, keys: list[str], extra: list[Extra],
          rows: list[dict[str, Any]]) -> RichTable:
    """One table: a row per configuration, a column per figure, then the `extra` columns."""
    t = RichTable(title=title, title_justify="left", header_style="bold")
    t.add_column("configuration", no_wrap=True)
    for key in keys:
        t.add_column("\n".join(heading(key)), justify="right")
    for lines, _ in extra:
        t.add_column("\n".join(lines), justify="right")
    for i, row in enumerate(rows):
        t.add_row(row["label"], *(cell(doc, row["id"], key) for key in keys),
                  *(cells[i] or "[dim]n/a[/]" for _, cells in extra))
    return t


def print_report(doc: dict[str, Any]) -> None:
    out = console()
    out.print()
    out.print(f"[bold]sidequest benchmark[/] {doc['started']}  {setup_text(doc)}; {TIMES}: ratio to {REFERENCE}, "
              "same round; ↑ higher is better, ↓ lower")
    for title, keys, extra, rows in tables(doc):
        out.print(table(doc, title, keys, extra, rows))
    for row in doc["rows"]:
        out.print(f"[dim]{row['label']}: {row['note']}[/]", highlight=False)
    out.print(versions_line(doc), highlight=False)
    for line in [ceiling_line(doc), *baseline_lines(doc), *fairness_lines(doc), *backlog_lines(doc)]:
        if line:
            out.print(line)
    for line in goal_lines(doc, lambda met: "[green]met[/]" if met else "[red]missed[/]"):
        out.print(line)
    style = {"skipped": "[yellow]skipped[/]", "note": "[yellow]note[/]", "n/a": "[red]n/a[/]"}
    for kind, text, more in problems(doc):
        out.print(f"{style[kind]} ", end="")
        out.print(text, highlight=False, markup=False)
        for line in more:
            out.print(f"      {line}", style="dim", highlight=False, markup=False)
    out.print(f"logs: {doc.get('log_dir')}")


def write_json(doc: dict[str, Any], stamp: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1, sort_keys=False, default=str)
    path = RESULTS / f"{stamp}.json"
    path.write_text(text)
    (RESULTS / "latest.json").write_text(text)
    return path
