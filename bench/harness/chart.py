"""The chart of a run's key figures (matplotlib, PNG and SVG): one horizontal bar panel per figure,
a bar per configuration labelled with its median and its ratio to Sidekiq of the same round.
Written as bench/results/latest.{png,svg} and, for a full run, docs/images/bench.{png,svg}."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import ratio_text
from .rows import BENCH, FIGURE, REFERENCE, RESULTS, TIMES

PANELS = ["throughput", "cpu_us_per_job", "bulk_enqueue", "latency_p50_ms", "commands_besides_job", "idle_rss_mb"]
DOCS = BENCH.parent / "docs" / "images"
COLORS = {"sidekiq": "#b5332e", "sidequest": "#2f6db5", "baseline": "#93b5e1"}  # baseline: a --baseline row


def bar_label(doc: dict[str, Any], row_id: str, key: str, value: float) -> str:
    figure = FIGURE[key]
    text = f"{value:,.{figure.digits}f}"
    ratio = doc["ratios"].get(row_id, {}).get(key)
    return text if row_id == REFERENCE or ratio is None else f"{text}  {TIMES}{ratio_text(ratio)}"


def panel(ax: Any, doc: dict[str, Any], key: str) -> None:
    figure = FIGURE[key]
    rows = [row for row in doc["rows"] if doc["medians"].get(row["id"], {}).get(key) is not None]
    values = [doc["medians"][row["id"]][key] for row in rows]
    y = range(len(rows))
    colors = [COLORS.get("baseline" if row.get("src") else row["peer"], "#8c8c8c") for row in rows]
    ax.barh(list(y), values, color=colors)
    ax.set_yticks(list(y), [row["label"] for row in rows], fontsize=8)
    ax.invert_yaxis()
    better = "higher is better" if figure.higher_is_better else "lower is better"
    ax.set_title(f"{figure.label} ({figure.unit}, {better})", fontsize=10)
    top = max(values, default=1) or 1
    ax.set_xlim(0, top * 1.45)
    for i, (row, value) in enumerate(zip(rows, values, strict=True)):
        ax.text(value + top * 0.01, i, bar_label(doc, row["id"], key, value), va="center", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.spines[["top", "right"]].set_visible(False)


def write_chart(doc: dict[str, Any], to_docs: bool) -> list[Path]:
    """Draw the chart; return the files written (none when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("chart skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return []
    keys = [key for key in PANELS if any(m.get(key) is not None for m in doc["medians"].values())]
    if not keys:
        return []
    cols = 2
    nrows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(12, 0.45 * len(doc["rows"]) * nrows + 1.6), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        panel(ax, doc, key)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    s, m = doc["settings"], doc["machine"]
    fig.suptitle(f"No-op jobs on one Redis, {m['cpu_count']} CPUs ({m['cpu_model']}); {s['jobs']:,} jobs, "
                 f"median of {s['rounds']} round(s), {TIMES}: ratio to {REFERENCE} in the same round; {doc['started']}",
                 fontsize=9)
    fig.tight_layout()
    targets = [RESULTS / "latest"] + ([DOCS / "bench"] if to_docs else [])
    written = []
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "svg"):
            path = target.with_suffix(f".{ext}")
            fig.savefig(path, dpi=130 if ext == "png" else None, metadata={"Date": None} if ext == "svg" else None)
            written.append(path)
    plt.close(fig)
    return written
