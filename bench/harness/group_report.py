"""The report's lines of the group rows (harness/groups.py measures them): each against its
reference of the same version, same round, and its SLOWLOG. Apart from groups.py, which the
phases import, because it reads the rounds' ratios (harness/rounds.py imports the phases)."""

from __future__ import annotations

from typing import Any

from .rounds import median, ratios_in_rounds
from .rows import GROUPS, GROUPS_ROW, HELD_ROW, OPEN_ROW, TIMES

# -- the report's lines ----------------------------------------------------------------------------------------
# (row, its reference: the same jobs without what the row adds, the goal of the ratio, what the row is)
VERSUS = ((GROUPS_ROW, "sidequest", 0.8, f"{GROUPS:,} groups", "the same jobs without a group"),
          (HELD_ROW, OPEN_ROW, 0.9, "held groups", "the same open group's jobs with no held group"))


def lines(doc: dict[str, Any]) -> list[str]:
    """Each group row (and its baseline rows) against its reference of the same version, same round:
    the median of the per-round ratios (each round's in brackets), then its SLOWLOG."""
    rows = {row["id"]: row for row in doc["rows"]}
    found = []
    for row in doc["rows"]:
        base = row.get("baseline_of") or row["id"]
        for mine, reference, goal, what, versus in VERSUS:
            if base != mine:
                continue
            ref = reference + row["id"][len(base):]  # `sidequest@<sha>` beside `sidequest-groups@<sha>`
            jobs = doc["medians"].get(row["id"], {}).get("throughput")
            if jobs is None:
                continue
            ratios = ratios_in_rounds(doc["rounds"], row["id"], "throughput", ref)
            each = f" ({', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            head = f"{what}, {row['label']}: {jobs:,.0f} jobs/s"
            if ratios and ref in rows:
                head += (f", {TIMES}{median(ratios):.2f}{each} {versus} ({rows[ref]['label']}), same round "
                         f"(goal ≥ {goal})")
            found.append(head + slow_text(doc, row["id"]))
    return found


def slow_text(doc: dict[str, Any], row_id: str) -> str:
    """`; SLOWLOG: N commands over 10 ms per round, the longest L ms (COMMAND ...)`, over every round."""
    per_round = [rnd["results"][row_id] for rnd in doc["rounds"] if row_id in rnd["results"]]
    counts = [r["figures"]["slow_commands"] for r in per_round if r["figures"].get("slow_commands") is not None]
    if not counts:
        return ""
    slowest = max((s for r in per_round for s in r["details"].get("slowest", [])), key=lambda s: s["ms"],
                  default=None)
    longest = f", the longest {slowest['ms']:.1f} ms ({slowest['command']})" if slowest else ""
    return f"; SLOWLOG: {', '.join(map(str, counts))} command(s) over 10 ms per round{longest}"
