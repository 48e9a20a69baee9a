"""Interleaved rounds and what is made of them.

Round i measures every configuration once, in the order of the table rotated by i, so that a
drift of the machine (other load, thermal, Redis memory) spreads evenly over the peers. Each
figure's summary is the median over rounds; its ratio to Sidekiq is computed within each round
(peer / Sidekiq of that same round) and then the median of those ratios is taken."""

from __future__ import annotations

import statistics
from typing import Any

from .peers import Peer
from .phases import Context, measure
from .redisops import Counted
from .rows import FIGURES, REFERENCE, Row, Settings


def rotated(rows: list[Row], i: int) -> list[Row]:
    k = i % len(rows) if rows else 0
    return rows[k:] + rows[:k]


def run_rounds(peers: dict[str, Peer], settings: Settings, counted: dict[str, Counted]) -> list[dict[str, Any]]:
    """Each row once a round, on its Redis (`counted`: row id -> the shared server's, or the Cluster's)."""
    rows = [peer.row for peer in peers.values()]
    rounds = []
    for i in range(settings.rounds):
        order = rotated(rows, i)
        results = {}
        for row in order:
            print(f"  round {i + 1}/{settings.rounds}  {row.label:<32}", end="", flush=True)
            ctx = Context(peers[row.id], settings, i + 1, counted[row.id])
            results[row.id] = measure(ctx)
            print(progress(results[row.id]), flush=True)
        rounds.append({"round": i + 1, "order": [row.id for row in order], "results": results})
    return rounds


def progress(result: dict[str, Any]) -> str:
    f = result["figures"]
    parts = []
    if f.get("throughput"):
        parts.append(f"{f['throughput']:,.0f} jobs/s, {f['cpu_us_per_job']:,.0f} µs CPU/job")
    if f.get("latency_p50_ms") is not None:
        parts.append(f"latency p50 {f['latency_p50_ms']:.1f} ms")
    if f.get("sched_p50_s") is not None:
        parts.append(f"late p50 {f['sched_p50_s']:.2f} s")
    if result["errors"]:
        parts.append("FAILED: " + ", ".join(result["errors"]))
    return "  " + "; ".join(parts)


def values(rounds: list[dict[str, Any]], row_id: str, key: str) -> list[float]:
    found = (rnd["results"].get(row_id, {}).get("figures", {}).get(key) for rnd in rounds)
    return [v for v in found if v is not None]


def ratios_in_rounds(rounds: list[dict[str, Any]], row_id: str, key: str, reference: str = REFERENCE) -> list[float]:
    """row_id's figure / the reference row's, in each round that measured both."""
    found = []
    for rnd in rounds:
        mine = rnd["results"].get(row_id, {}).get("figures", {}).get(key)
        ref = rnd["results"].get(reference, {}).get("figures", {}).get(key)
        if mine is not None and ref:
            found.append(mine / ref)
    return found


def summarise(rounds: list[dict[str, Any]], row_ids: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(medians, ratios): row id -> figure -> median over rounds (None when never measured)."""
    medians: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for row_id in row_ids:
        medians[row_id] = {f.key: median(values(rounds, row_id, f.key)) for f in FIGURES}
        ratios[row_id] = {f.key: median(ratios_in_rounds(rounds, row_id, f.key)) for f in FIGURES}
    return medians, ratios


def median(found: list[float]) -> float | None:
    return statistics.median(found) if found else None
